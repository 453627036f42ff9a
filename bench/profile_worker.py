"""The worker's side of a job alone, quicker than ``make bench``: the bench's stack on moto,
N ``demo.noop`` jobs submitted with no worker running (bench/floor.py's clients), then ONE
worker process drains them. Per job: the worker process's CPU (from /proc), PostgreSQL's
execution time (pg_stat_statements, by statement) and the broker requests (the counting
proxy); the drain's jobs/s. With ``--profile``, another N jobs are drained by a worker run
under pyinstrument (not a project dependency), and where a job's time goes is printed::

    uv run --with pyinstrument python -m bench.profile_worker --jobs 2000 --profile

The figures come from the unprofiled rounds (the sampler slows the process it samples).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import signal
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import psycopg

from app.store import sql
from app.tools.stack.stack import Process
from bench import floor
from bench.profile_submit import summary
from bench.stack import BenchStack, quiet_and_interruptible

# Where a job's time goes in the worker: (label, function, file ending), inclusive time.
PARTS = (
    # uvloop's loop is C: its idle wait is this frame's own time.
    ("the worker's loop, all of it (uvloop's idle wait included)", "run", "asyncio/runners.py"),
    # Each part below is its own task (a receive, a record, a batched statement), so they
    # are side by side, not nested in one another.
    ("the receive loop's own work (_poll)", "_poll", "event_source_mapping.py"),
    ("ReceiveMessage (the transport's receive)", "receive", "app/transport/sqs.py"),
    ("SQS records built (to_record)", "to_record", "event_source_mapping.py"),
    ("the batch handed to the engine (Engine.handle)", "handle", "app/worker/engine.py"),
    ("a record, all of it (Engine.process)", "process", "app/worker/engine.py"),
    ("  tracing: the attempt's spans (tracing off)", "attempt", "app/worker/traces.py"),
    ("  tracing: the claim's export (tracing off)", "export", "app/worker/traces.py"),
    ("  tracing: the outcome attribute", "outcome", "app/worker/traces.py"),
    ("  the kind's run under its lease (Keeper.run)", "run", "app/worker/leases.py"),
    ("    the kind's code (demo.noop) and its output", "_execute", "app/worker/engine.py"),
    ("  the job's context (LeasedContext)", "__init__", "app/worker/context.py"),
    ("events: the cancel listener's bookkeeping", "invocation", "app/worker/cancels.py"),
    ("DeleteMessageBatch (the delete/ack)", "delete_batch", "app/transport/sqs.py"),
    ("the claim statement (claim_batch)", "claim_batch", "app/store/leases.py"),
    ("start (start_batch)", "start_batch", "app/store/leases.py"),
    ("the completion (succeed_batch)", "succeed_batch", "app/store/leases.py"),
    ("other outcome statements (finish)", "finish", "app/store/leases.py"),
    ("parked jobs released (release_parked)", "release_parked", "app/services/parking.py"),
    ("every statement (the store's executor)", "_execute", "app/store/pool.py"),
    ("every SQS call (aiobotocore)", "_make_api_call", "aiobotocore/client.py"),
    ("logging (any logger call that logs)", "_log", "logging/__init__.py"),
    ("metrics: count", "count", "app/metrics.py"),
    ("metrics: observe", "observe", "app/metrics.py"),
    ("metrics: a job's end (store/endings.py)", "count", "app/store/endings.py"),
    ("the worker's presence heartbeat", "kept", "app/worker/presence.py"),
)


# What pg_stat_statements makes a constant ($n), and a placeholder: each made "?" on both
# sides, so a statement it reports is matched with the named query it came from.
_CONSTANT = re.compile(
    r"\$\d+|'(?:[^']|'')*'|\b\d+(?:\.\d+)?\b|\b(?:true|false|null)\b|(?<=extract\()\w+", re.I
)
# PostgreSQL 17 reports a list of constants as its first: IN ($1 /*, ... */).
_LIST = re.compile(r"\?(?:\s*,\s*\?)+|\? /\*, \.\.\. \*/")


def _shape(text: str) -> str:
    flat = " ".join(_CONSTANT.sub("?", text).split()).rstrip(";")  # reported without it
    return _LIST.sub("?", flat)


NAMED = {_shape(sql.positional[text][0]): name for name, text in sql.queries.items()}


def _statements(stack: BenchStack) -> list[tuple[str, int, float]]:
    """pg_stat_statements since the last reset (the benchmark's own left out): each
    statement's name (app/store/sql/queries, else its first words), calls and execution
    ms, costliest first."""
    if not stack.pg_stat_statements:
        return []
    with psycopg.connect(stack.database_url, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT s.query, s.calls, s.total_exec_time AS bench_own FROM pg_stat_statements s "
            "JOIN pg_database d ON d.oid = s.dbid AND d.datname = current_database() "
            "WHERE s.query NOT LIKE %s ORDER BY s.total_exec_time DESC",
            ("%bench_own%",),
        ).fetchall()
    named = [(NAMED.get(_shape(str(q))) or " ".join(str(q).split())[:60], c, t) for q, c, t in rows]
    return [(name, int(c), float(t)) for name, c, t in named]


async def _drained(stack: BenchStack, since: float, jobs: int) -> float:
    """Wait until the jobs submitted since ``since`` all succeeded; the drain's seconds
    (first start to last finish, as the bench's split phase times it)."""
    async with await psycopg.AsyncConnection.connect(stack.database_url, autocommit=True) as conn:
        deadline = time.monotonic() + 900
        while time.monotonic() < deadline:
            cur = await conn.execute(
                "SELECT count(*) FILTER (WHERE state = 'succeeded') AS bench_own, "
                "extract(epoch FROM max(finished_at) - min(started_at)) "
                "FROM jobs WHERE created_at >= to_timestamp(%s)",
                (since,),
            )
            row = await cur.fetchone()
            if row is not None and int(row[0]) >= jobs:
                return max(0.001, float(row[1]))
            await asyncio.sleep(0.1)
    raise TimeoutError(f"the worker did not drain {jobs} jobs in 900 s")


def _worker(stack: BenchStack, concurrency: int, profile: Path | None) -> Process:
    """One worker process (under pyinstrument when ``profile``), polling once it returns."""
    if profile is None:
        proc = stack.start_worker("profiled-w", concurrency)
    else:
        # Stack.start_worker's process, run under pyinstrument's sampler instead.
        ready = stack.logs / "ready" / "profiled-w-pyi"
        ready.parent.mkdir(parents=True, exist_ok=True)
        ready.unlink(missing_ok=True)
        args = [sys.executable, "-m", "pyinstrument", "-r", "session", "-o", str(profile)]
        args += ["-m", "app.cli", "worker", "--concurrency", str(concurrency)]
        env = {
            **stack.env,
            "TASKLEASE_WORKER_ID": "profiled-w-pyi",
            "TASKLEASE_WORKER_READY_FILE": str(ready),
        }
        proc = Process("worker-profiled", args, log_path=stack.logs / "worker-pyi.log", env=env)
        proc.ready_path = ready
        stack.procs.append(proc)
    deadline = time.monotonic() + 60
    while proc.ready_path is not None and not proc.ready_path.exists():
        if proc.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"the worker did not start (see {stack.logs})")
        time.sleep(0.005)
    return proc


async def one_round(
    stack: BenchStack, jobs: int, clients: int, concurrency: int, profile: Path | None = None
) -> dict[str, Any]:
    """Submit ``jobs`` with no worker running, then drain them with one worker."""
    since = time.time() - 1
    await floor.drive(stack.api_url, stack.api_headers, jobs, clients, "submit (no worker)")
    # A stopped worker's long poll lives on in the broker until its wait ends.
    await asyncio.sleep(float(stack.env.get("TASKLEASE_WAIT_TIME_SECONDS", "1")) + 0.5)
    stack.reset_counts()
    floor.pg_exec_ms(stack, reset=True)
    proc = _worker(stack, concurrency, profile)
    cpu0 = floor.cpu_seconds(proc.pid)
    seconds = await _drained(stack, since, jobs)
    cpu1 = floor.cpu_seconds(proc.pid)
    statements = _statements(stack)
    calls = stack.counts()["calls"]
    proc.send_signal(signal.SIGINT)  # a worker stops on SIGINT; pyinstrument then writes
    proc.wait(timeout=60)
    stack.procs.remove(proc)
    sent = sum(v for k, v in calls.items() if k != "ReceiveMessage(empty)")
    return {
        "jobs": jobs,
        "drain_jobs_per_s": round(jobs / seconds, 1),
        "worker_cpu_ms_per_job": (
            round((cpu1 - cpu0) * 1000 / jobs, 3) if cpu0 is not None and cpu1 else None
        ),
        "pg_exec_ms_per_job": round(sum(t for _, _, t in statements) / jobs, 3),
        "pg_statements_per_job": round(sum(c for _, c, _ in statements) / jobs, 2),
        "pg_by_statement": [
            {"statement": s, "per_job": round(c / jobs, 3), "exec_ms_per_job": round(t / jobs, 4)}
            for s, c, t in statements[:12]
        ],
        "sqs_requests_per_job": round(sent / jobs, 3),
        "sqs_by_action": {k: round(v / jobs, 3) for k, v in sorted(calls.items())},
    }


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.profile_worker")
    p.add_argument("--jobs", type=int, default=2000)
    p.add_argument("--clients", type=int, default=8)
    p.add_argument("--worker-concurrency", type=int, default=2)
    p.add_argument("--rounds", type=int, default=1, help="measured drains (0: profile only)")
    p.add_argument("--profile", action="store_true", help="also profile a drain (pyinstrument)")
    p.add_argument("--out", type=Path, default=Path(".tasklease/worker-profile.pyisession"))
    p.add_argument("--data-dir", type=Path, default=Path(".tasklease/bench-worker"))
    args = p.parse_args(argv)
    quiet_and_interruptible()
    stack = BenchStack("moto", args.data_dir, args.worker_concurrency)
    try:
        stack.start_all()
        rounds = [
            asyncio.run(one_round(stack, args.jobs, args.clients, args.worker_concurrency))
            for _ in range(args.rounds)
        ]
        for r in rounds:
            print(json.dumps(r, indent=1))
        if len(rounds) > 1:
            for key in ("drain_jobs_per_s", "worker_cpu_ms_per_job", "pg_exec_ms_per_job"):
                print(f"median {key}: {round(statistics.median(r[key] for r in rounds), 3)}")
        if args.profile:
            args.out.parent.mkdir(parents=True, exist_ok=True)
            r = asyncio.run(
                one_round(stack, args.jobs, args.clients, args.worker_concurrency, args.out)
            )
            print(f"profiled drain: {r['drain_jobs_per_s']} jobs/s (slowed by the sampler)")
            print(summary(args.out, PARTS, within=("run", "asyncio/runners.py"), per=args.jobs))
            print(f"profile: {args.out} (pyinstrument --load {args.out} -r html: the tree)")
    finally:
        stack.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
