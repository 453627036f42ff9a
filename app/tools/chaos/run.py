"""A chaos run from start to verdict: the stack up, submissions under faults, the drain,
the redrive of transient dead letters, the second drain, the facts gathered and checked."""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import dataclasses
import json
import logging
import signal
import time
import traceback
import warnings
from typing import Any

from rich.console import Group
from rich.live import Live
from rich.table import Table

from app import errors
from app.states import JobState
from app.store import audit
from app.store.pool import Database
from app.tools.chaos import aftermath, agents, keyed
from app.tools.chaos import config as exits
from app.tools.chaos.answers import answer_all
from app.tools.chaos.checker import check, violated
from app.tools.chaos.config import Config, Run, err, out
from app.tools.chaos.faults import inject_faults, note_exits
from app.tools.chaos.leases import most_live_leases
from app.tools.chaos.messaging import send_all
from app.tools.chaos.per_kind import FINAL
from app.tools.chaos.report import render
from app.tools.chaos.stack import (
    MAX_MESSAGE_DELAY_SECONDS,
    WAKE_GRACE_SECONDS,
    ChaosStack,
    Unavailable,
)
from app.tools.chaos.talk import talk_facts
from app.tools.chaos.timeline import slowest, where_time_went
from app.tools.chaos.workload import deadline_refs, submit_all, workload


async def poll_counts(database: Database, run: Run) -> None:
    """The counts by state for the display; the database may be down for a moment."""
    with contextlib.suppress(errors.StoreError, TimeoutError):
        run.counts = await asyncio.wait_for(audit.counts_by_state(database), 2)


async def drain(
    database: Database,
    stack: ChaosStack,
    run: Run,
    ids: list[str],
    within: float,
    ready: asyncio.Event | None = None,
) -> bool:
    """Wait until every job in ``ids``, and every job they spawned, is succeeded,
    dead_lettered or cancelled (or waiting), and ``ready`` is set."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        with contextlib.suppress(errors.StoreError, TimeoutError):
            done = await asyncio.wait_for(audit.count_in_states(database, ids, FINAL), 5)
            left = await asyncio.wait_for(audit.count_unfinished(database, FINAL), 5)
            if done == len(ids) and not left and (ready is None or ready.is_set()):
                return True
        note_exits(stack, run)
        await asyncio.sleep(0.5)
    return False


def display(cfg: Config, run: Run) -> Group:
    counts = Table(title=f"tasklease chaos · {run.phase}", title_justify="left")
    states = [s.value for s in JobState]
    for s in states:
        counts.add_column(s, justify="right")
    counts.add_row(*(str(run.counts.get(s, 0)) for s in states))
    faults = (
        f"acked {len(run.acked)}/{cfg.jobs}   kills {len(run.kills)}   "
        f"{'redis' if cfg.transport == 'redis' else 'sqs'} restarts "
        f"{run.redis_restarts or run.sqs_restarts}   pg restarts {run.pg_restarts}   "
        f"approvals answered {len(run.answers)}   "
        f"elapsed {time.monotonic() - run.started:.0f} s"
    )
    return Group(counts, faults)


async def progress(cfg: Config, database: Database, run: Run, stop: asyncio.Event) -> None:
    if err.is_terminal:
        with Live(display(cfg, run), console=err, refresh_per_second=4, transient=True) as live:
            while not stop.is_set():
                await poll_counts(database, run)
                live.update(display(cfg, run))
                await asyncio.sleep(0.5)
        return
    last = 0.0
    while not stop.is_set():
        await poll_counts(database, run)
        if time.monotonic() - last >= 5:
            last = time.monotonic()
            counts = " ".join(f"{k}={v}" for k, v in sorted(run.counts.items()))
            run.note(f"{run.phase}: acked {len(run.acked)}/{cfg.jobs}  {counts}")
        await asyncio.sleep(0.5)


async def orchestrate(
    cfg: Config, stack: ChaosStack, run: Run, agent_results: dict[str, Any]
) -> dict[str, Any]:
    """The run from the first submission to the checker's report; ``agent_results``: what
    an uninterrupted run of each agent job gives (agents.uninterrupted)."""
    items, tags = workload(cfg)
    database = Database(stack.database_url, min_size=1, max_size=4)
    await database.open()
    stop_display = asyncio.Event()
    shown = asyncio.create_task(progress(cfg, database, run, stop_display))
    try:
        seeded = await audit.seed_history(database, cfg.history_jobs)
        run.note(f"{seeded} finished jobs of 40 days ago written, for the sweeper to prune")
        run.phase = "submitting, with faults"
        run.mark("faults_started")
        submitted = asyncio.Event()
        # Set when the drain has ended: until then the harness keeps answering.
        over = asyncio.Event()
        await agents.throttle(stack.agent_model_url)
        faults = asyncio.create_task(inject_faults(cfg, stack, run, submitted, database))
        answering = asyncio.create_task(
            answer_all(cfg, run, database, stack.api_url, items, submitted, over)
        )
        answering.add_done_callback(lambda _: run.mark("answered"))
        all_sent = asyncio.Event()
        talking = asyncio.create_task(
            send_all(cfg, run, stack.api_url, stack.api_headers, items, submitted, all_sent, over)
        )
        await asyncio.gather(
            submit_all(cfg, stack, run, items), keyed.submit_under_faults(cfg, stack, run)
        )
        submitted.set()
        run.mark("submitted")
        run.note(f"{len(run.acked)} of {cfg.jobs} jobs acknowledged ({run.submit_retries} retries)")
        run.phase = "faults continue"
        await faults
        run.mark("faults_ended")
        await keyed.submit_after_faults(cfg, stack, run)
        run.phase = "draining"
        ids = list(run.acked.values())
        # The approvals are answered while the system drains: one waits for its first run
        # (behind the backlog) to open its callback, and the drain waits for its answer.
        # A chat job waiting for a message not sent yet would pass for drained.
        drained = await drain(database, stack, run, ids, cfg.drain_timeout, all_sent)
        await finish_answering(asyncio.gather(answering, talking), over, drained)
        run.note(f"the harness answered {answered(run)} of {len(run.answers)} approvals")
        if run.last_fault is not None:
            run.timings["time_to_drain_after_last_fault"] = round(
                time.monotonic() - run.last_fault, 2
            )
        run.mark("drained")
        run.note("drained" if drained else f"[red]not drained within {cfg.drain_timeout:.0f} s[/]")
        first = await aftermath.dead_letter_causes(database)

        run.phase = "redriving transient dead letters"
        run.note("restarting the workers with TASKLEASE_FAKE_MODEL_TRANSIENT_RATE=0")
        with run.outage("workers restarted"):
            await asyncio.to_thread(
                stack.restart_workers, {"TASKLEASE_FAKE_MODEL_TRANSIENT_RATE": "0"}
            )
        redriven = await aftermath.redrive_transient(
            stack, database, skip=aftermath.deadlined(run, items)
        )
        run.note(f"redriven {len(redriven)} dead letters with tasklease's own redrive")
        run.phase = "draining the redriven jobs"
        redrained = await drain(database, stack, run, ids, cfg.drain_timeout)
        run.mark("redrained")
        run.note(
            "drained" if redrained else f"[red]not drained within {cfg.drain_timeout:.0f} s[/]"
        )
        retention = await aftermath.pruned_history(database, seeded)
        facts = await aftermath.gather_facts(database, stack)
        talk = await talk_facts(database, stack, run, items)
    finally:
        stop_display.set()
        await shown
        await database.close()
    report = check(
        submitted=cfg.jobs,
        acked=run.acked,
        tags=tags,
        redriven=redriven,
        kills=run.kills,
        plans={i.ref: i.plan for i in items if i.plan},
        agent_results=agent_results,
        answers=run.answers,
        # A wake-up lost is re-sent after the grace; the re-sent one gets as long again.
        grace=2 * WAKE_GRACE_SECONDS,
        delay_cap=MAX_MESSAGE_DELAY_SECONDS,
        sent=run.sent,
        deadline_refs=deadline_refs(items),
        running_cap=cfg.max_running,
        key_bound=keyed.KEY_BOUND,
        outages=keyed.excused(cfg, run),
        keyed_submitted=cfg.keyed_jobs > 0,
        **talk,
        **facts,
    )
    report["dead_letters_after_first_drain"] = first
    report["time"] = where_time_went(
        timings=run.timings,
        started_at=run.started_at,
        acked=run.acked,
        jobs=facts["jobs"],
        events=facts["events"],
        callbacks=facts["callbacks"],
        answers=run.answers,
    )
    report["retention"] = retention
    report["running_cap"] = {
        "cap": cfg.max_running,
        "most_live_leases": most_live_leases(facts["events"]),
    }
    return report


# Drained, every approval is decided; what answers are left (second answers, a reply
# being retried) meet a quiet system and end within seconds.
ANSWERS_AFTER_DRAIN = 30.0


async def finish_answering(
    answering: asyncio.Future[Any], over: asyncio.Event, drained: bool
) -> None:
    """The harness's answers (and messages) end with the drain: let those left finish,
    then stop them (``over``: an answer still not through is reported as given up)."""
    if drained:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(asyncio.shield(answering), ANSWERS_AFTER_DRAIN)
    over.set()
    await answering


def answered(run: Run) -> int:
    return sum(1 for a in run.answers.values() if a.get("first") == "answered")


def main(cfg: Config) -> int:
    warnings.filterwarnings("ignore", category=UserWarning, module="platformdirs")
    # The pool retries while PostgreSQL restarts; that is the fault, not news.
    logging.getLogger("psycopg.pool").setLevel(logging.ERROR)
    for option, value, allowed in (
        ("--transport", cfg.transport, ("sqs", "redis")),
        ("--sqs", cfg.sqs, ("moto", "localstack")),
        ("--redis-persistence", cfg.redis_persistence, ("aof", "none", "both")),
    ):
        if value not in allowed:
            err.print(f"[red]{option} must be {' or '.join(allowed)}, not {value!r}[/]")
            return 2

    def interrupted(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    # Both, explicitly: a shell starts background jobs with SIGINT ignored.
    signal.signal(signal.SIGTERM, interrupted)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    if cfg.waiting + cfg.agents > 1:
        err.print(
            f"[red]--waiting and --agents add up to more than 1 ({cfg.waiting + cfg.agents:g})[/]"
        )
        return 2
    stack = ChaosStack(cfg)
    run = Run()
    try:
        stack.prepare_dir()
        agent_results = _start(cfg, stack)
        run.mark("started")
        run.note(
            f"seed {cfg.seed}; stack up in {run.timings['started']:.1f} s: {cfg.workers} workers "
            f"({stack.slow_slots} slow), {stack.carrier_name}, logs in {stack.logs_dir}"
        )
        report = asyncio.run(orchestrate(cfg, stack, run, agent_results))
    except Unavailable as exc:
        err.print(f"[red]unavailable:[/] {exc}")
        return exits.EXIT_UNAVAILABLE
    except errors.ConfigError as exc:
        err.print(f"[red]configuration error:[/] {exc}")
        return 2
    except KeyboardInterrupt:
        err.print("interrupted: stopping everything")
        return exits.EXIT_INTERRUPTED
    except Exception as exc:
        # A fault that could not be injected (or undone) ends the run; there is no verdict.
        (stack.dir / "chaos-error.txt").write_text(traceback.format_exc())
        err.print(f"[red]the chaos run could not complete:[/] {type(exc).__name__}: {exc}")
        err.print(f"traceback in {stack.dir / 'chaos-error.txt'}, logs in {stack.logs_dir}")
        return exits.EXIT_ABORTED
    finally:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        try:
            stack.stop()
        finally:
            signal.signal(signal.SIGINT, signal.default_int_handler)
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
    run.mark("total")
    return _conclude(cfg, stack, run, report)


def _start(cfg: Config, stack: ChaosStack) -> dict[str, Any]:
    """The stack started, and meanwhile, on a thread, an uninterrupted run of each agent
    job's question (agents.uninterrupted): what each agent job must end with."""
    if cfg.agents > 0:
        agents.require_frameworks()
    carrier = "Redis" if cfg.transport == "redis" else "the SQS server"
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        uninterrupted = pool.submit(asyncio.run, agents.uninterrupted(workload(cfg)[0]))
        with err.status(f"starting PostgreSQL, {carrier}, API, workers, sweeper…"):
            stack.start_servers()
            stack.start_processes()
        return uninterrupted.result()


def _conclude(cfg: Config, stack: ChaosStack, run: Run, report: dict[str, Any]) -> int:
    """The checker's report with the run's faults and timings: written, shown, judged."""
    report["faults"] = {
        "kills": len(run.kills),
        "agent_crashes": [k["point"] for k in run.kills if "@" in k.get("point", "")],
        "other_crash_points": [k["point"] for k in run.kills if "@" not in k.get("point", "@")],
        "sqs_restarts": run.sqs_restarts,
        "redis_restarts": run.redis_restarts,
        "carrier_restarts": run.carrier_restarts,
        "pg_restarts": run.pg_restarts,
        "unbidden_exits": run.exits,
        "kill_log": run.kills,
    }
    report["timings"] = run.timings
    report["versions"]["deployed_at"] = run.timings.get("deployed")
    report["time"] = {**slowest(run.timings), **report.get("time", {})}
    report["submit_retries"] = run.submit_retries
    report["rejected_submissions"] = run.rejected
    report["config"] = {k: str(v) for k, v in dataclasses.asdict(cfg).items()}
    report["slow_workers"] = stack.slow_slots
    report["valid"] = not violated(report)
    (stack.dir / "report.json").write_text(json.dumps(report, indent=2, default=str))
    out.print(render(report))
    out.print(f"report: {stack.dir / 'report.json'}", highlight=False)
    return exits.EXIT_VIOLATED if violated(report) else exits.EXIT_OK
