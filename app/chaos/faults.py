"""The chaos run's faults: SIGKILLed workers every few seconds, one SQS server restart
(moto loses every message: a broker that drops messages) and one PostgreSQL restart."""

from __future__ import annotations

import asyncio
import math
import random
import time

from app.chaos.config import Config, Run
from app.chaos.stack import ChaosStack


async def inject_faults(cfg: Config, stack: ChaosStack, run: Run, submitted: asyncio.Event) -> None:
    rng = random.Random(cfg.seed + 1)  # noqa: S311 - reproducible victims, not secrets
    t0 = time.monotonic()
    sqs_at, pg_at = t0 + 0.3 * cfg.fault_seconds, t0 + 0.6 * cfg.fault_seconds
    next_kill = t0 + cfg.kill_every
    submit_end: float | None = None
    while True:
        now = time.monotonic()
        if submitted.is_set() and submit_end is None:
            submit_end = now
        end = max(t0 + cfg.fault_seconds, (submit_end or math.inf) + 2 * cfg.kill_every)
        enough = run.sqs_restarts and run.pg_restarts and len(run.kills) >= cfg.min_kills
        # The second bound only stops a run whose kills cannot happen (no live worker):
        # its report then shows too few kills, and the test fails instead of hanging.
        if (now >= end and enough) or now >= end + (cfg.min_kills + 2) * cfg.kill_every:
            return
        if not run.sqs_restarts and now >= sqs_at:
            run.note(f"restarting the SQS server ({cfg.sqs}): its messages are lost")
            await asyncio.to_thread(stack.restart_sqs)
            run.sqs_restarts += 1
            run.last_fault = time.monotonic()
            run.note("SQS server back, queues created again")
        elif not run.pg_restarts and now >= pg_at:
            run.note("restarting PostgreSQL")
            await asyncio.to_thread(stack.restart_postgres)
            run.pg_restarts += 1
            run.last_fault = time.monotonic()
            run.note("PostgreSQL back")
        elif now >= next_kill:
            kill = stack.kill_worker(rng)
            # From now, not from the schedule: after a restart that took longer than
            # kill_every, the kills it delayed come one by one, not all at once.
            next_kill = now + cfg.kill_every
            if kill:
                run.kills.append(kill)
                run.last_fault = time.monotonic()
                run.note(
                    f"SIGKILL {kill['worker']} (pid {kill['pid']}), started {kill['replacement']}"
                )
        for dead in stack.exited_unbidden():
            run.exits.append(dead)
            run.note(f"[yellow]exited unbidden:[/] {dead}")
        await asyncio.sleep(0.1)
