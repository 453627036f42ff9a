"""The chaos run's faults: SIGKILLed workers every few seconds, the carrier's server
restarted, and PostgreSQL restarted once.

The carrier's restarts: on SQS one (moto loses every message and queue: a broker that
drops messages); on Redis, by --redis-persistence, one SIGKILL of redis-server running
with its AOF (appendfsync everysec: at most the last second of writes is lost), one
running without persistence (every stream, consumer group, pending and delayed entry is
lost), or both, the AOF one first. On Redis the run measures what each restart lost and
how long until it was made good (recovery.py).

Between them, a deploy: the workers restarted serving demo.revised's version 2 instead
of its version 1 (stack.deploy), while jobs started on version 1 wait in their nap."""

from __future__ import annotations

import asyncio
import contextlib
import math
import random
import time
from typing import Any

from app import errors
from app.demos import revised
from app.store import audit
from app.store.pool import Database
from app.tools.chaos import recovery
from app.tools.chaos.config import DEPLOY_AT, Config, Run
from app.tools.chaos.stack import ChaosStack


def server_faults(cfg: Config) -> list[tuple[float, str]]:
    """(when, as a share of the fault phase; which): the restarts of the run."""
    if cfg.transport != "redis":
        return [(0.3, "sqs"), (0.6, "postgres")]
    if cfg.redis_persistence == "both":
        return [(0.25, "redis-aof"), (0.5, "postgres"), (0.75, "redis-none")]
    return [(0.3, f"redis-{cfg.redis_persistence}"), (0.6, "postgres")]


async def inject_faults(
    cfg: Config, stack: ChaosStack, run: Run, submitted: asyncio.Event, database: Database
) -> None:
    rng = random.Random(cfg.seed + 1)  # noqa: S311 - reproducible victims, not secrets
    t0 = time.monotonic()
    schedule = sorted([*server_faults(cfg), (DEPLOY_AT, "deploy")])
    planned = [(t0 + share * cfg.fault_seconds, name) for share, name in schedule]
    watches: list[asyncio.Task[None]] = []
    next_kill = t0 + cfg.kill_every
    submit_end: float | None = None
    while True:
        now = time.monotonic()
        if submitted.is_set() and submit_end is None:
            submit_end = now
        end = max(t0 + cfg.fault_seconds, (submit_end or math.inf) + 2 * cfg.kill_every)
        enough = not planned and len(run.kills) >= cfg.min_kills
        # The second bound only stops a run whose kills cannot happen (no live worker):
        # its report then shows too few kills, and the test fails instead of hanging.
        if (now >= end and enough) or now >= end + (cfg.min_kills + 2) * cfg.kill_every:
            break
        if planned and now >= planned[0][0]:
            _, name = planned.pop(0)
            watch = await restart(name, cfg, stack, run, database)
            if watch is not None:
                watches.append(watch)
            run.last_fault = time.monotonic()
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
        note_exits(stack, run)
        await asyncio.sleep(0.1)
    await asyncio.gather(*watches)


def note_exits(stack: ChaosStack, run: Run) -> None:
    """The workers that died unbidden, and those that died at their crash point inside an
    agent's step (kills: the run's faults); each replaced."""
    for dead in stack.exited_unbidden():
        run.exits.append(dead)
        run.note(f"[yellow]exited unbidden:[/] {dead}")
    while stack.crashed:
        kill = stack.crashed.pop(0)
        run.kills.append(kill)
        run.last_fault = time.monotonic()
        run.note(f"{kill['worker']} died at {kill['point']}, started {kill['replacement']}")


async def restart(
    name: str, cfg: Config, stack: ChaosStack, run: Run, database: Database
) -> asyncio.Task[None] | None:
    """One server restart (or the deploy); on Redis, the task that watches its recovery."""
    with run.outage(name):
        return await _restart(name, cfg, stack, run, database)


# How long the deploy waits for a demo.revised job to have started on version 1.
FIRST_V1_START_SECONDS = 120.0


async def _first_start_on_v1(run: Run, database: Database) -> None:
    """Wait until a demo.revised job started on version 1 is unfinished, so the deploy
    has one to carry across versions: on a loaded machine the first workers may not have
    claimed anything by the deploy's planned time (the gate then fails on v1_to_v2 = 0,
    having tested nothing). Bounded: past it the deploy goes on and the report says so."""
    waited = time.monotonic()
    while time.monotonic() - waited < FIRST_V1_START_SECONDS:
        with contextlib.suppress(errors.StoreError):
            if await audit.started_on(database, revised.KIND, "1"):
                if time.monotonic() - waited > 1:
                    run.note(
                        f"deploy waited {time.monotonic() - waited:.1f} s for a version-1 start"
                    )
                return
        await asyncio.sleep(0.5)
    run.note("[yellow]deploy: no demo.revised job started on version 1 in time[/]")


async def _restart(
    name: str, cfg: Config, stack: ChaosStack, run: Run, database: Database
) -> asyncio.Task[None] | None:
    started = time.monotonic()
    if name == "deploy":
        await _first_start_on_v1(run, database)
        run.note(f"deploying: the workers restarted on {revised.V2_MODULE}")
        await asyncio.to_thread(stack.deploy, revised.V1_MODULE, revised.V2_MODULE)
        run.mark("deployed")
        run.note(f"deployed {revised.KIND} version 2 in {time.monotonic() - started:.1f} s")
        return None
    if name == "postgres":
        run.note("restarting PostgreSQL")
        await asyncio.to_thread(stack.restart_postgres)
        run.pg_restarts += 1
        run.note("PostgreSQL back")
        return None
    record: dict[str, Any] = {"carrier": name, "at": round(started - run.started, 2)}
    run.carrier_restarts.append(record)
    if name == "sqs":
        run.note(f"restarting the SQS server ({cfg.sqs}): its messages are lost")
        await asyncio.to_thread(stack.restart_sqs)
        run.sqs_restarts += 1
        record["took"] = round(time.monotonic() - started, 2)
        run.note("SQS server back, queues created again")
        return None
    aof = name == "redis-aof"
    run.note(
        "SIGKILL redis-server, AOF on: at most its last second of writes is lost"
        if aof
        else "SIGKILL redis-server, no persistence: every stream, group and entry is lost"
    )
    await asyncio.to_thread(stack.restart_redis, appendonly=aof)
    back = time.monotonic()
    run.redis_restarts += 1
    record["took"] = round(back - started, 2)
    assert stack.redis is not None
    port, streams = stack.redis.port, stack.redis_streams()
    lost = await recovery.lost_by_restart(database, port, streams, record)
    run.note(
        f"redis-server back in {record['took']:.1f} s ({'AOF' if aof else 'empty'}): of "
        f"{record['needed']} jobs that need a message, {len(lost)} have none"
    )

    async def watched() -> None:
        await recovery.watch(database, port, streams, lost, back, record)
        if "recovered_in" in record:
            run.note(f"{name}: every lost message made good {record['recovered_in']:.1f} s after")
        else:
            run.note(f"[red]{name}: {len(record['unrecovered'])} lost messages not made good[/]")

    return asyncio.create_task(watched())
