"""``make cost`` (``python -m bench.cost``): what the Lambda deployment does per job,
measured on real parts, for ``tasklease cost`` to price.

Embedded PostgreSQL with pg_stat_statements and moto's SQS server behind the counting
proxy (bench/stack.py, bench/proxy.py); the three Lambda handlers run in this process
(bench/cost_lambda.py): the API through Mangum with API Gateway HTTP API events (single
``POST /v1/jobs`` and ``POST /v1/jobs/batch``), the worker with event source mapping
batches received from the real queue (the batch size of app/settings/shared_settings.json), the
sweeper idle. Per kind and submission mode: invocations and handler time per function,
the code's SQS requests by action (the proxy), the event source mapping's own requests
(counted here), PostgreSQL round trips (pg_stat_statements), log bytes. The fake model
answers at once: the model's latency is an assumption of the pricing (--model-seconds).
Writes bench/results/cost.json.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime as dt
import json
import logging
import math
import os
import sys
import time
import warnings
from pathlib import Path
from typing import Any

import psycopg
from rich.console import Console

from bench import cost_memory, report
from bench.cost_lambda import EventSource, Timings, api_event, cold_start, timed
from bench.cost_memory import Context
from bench.cost_tally import Bytes, combine
from bench.measure import PgStats
from bench.stack import BenchStack, Unavailable

err = Console(stderr=True)
ROOT = Path(__file__).resolve().parents[1]
TICKET = {"ticket_id": "T-1", "subject": "Refund please", "body": "I was charged twice."}
PAYLOADS: dict[str, dict[str, Any]] = {"demo.noop": {}, "support.triage": TICKET}
# Read from the kinds' code (app/demos/basic.py, app/demos/triage/__init__.py): the model
# calls a job makes, one after the other, and its effects (a durable function's steps).
MODEL_CALLS = {"demo.noop": 0, "support.triage": 1}
EFFECTS = {"demo.noop": 0, "support.triage": 2}
SCHEDULER_INPUT = {"source": "tasklease.scheduler"}


def parse(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="make cost ARGS=...", description=__doc__.split("\n\n")[0])
    p.add_argument(
        "--jobs", type=int, default=100, help="jobs per kind, mode and round (default 100)"
    )
    p.add_argument(
        "--trickle-jobs",
        type=int,
        default=30,
        help="jobs per kind and round handed to the worker one per invocation (default 30)",
    )
    p.add_argument("--rounds", type=int, default=3, help="rounds of each measurement (default 3)")
    p.add_argument("--sweeps", type=int, default=10, help="idle sweeper passes timed (default 10)")
    p.add_argument(
        "--memory-jobs",
        type=int,
        default=100,
        help="jobs per kind run through a fresh worker process for its peak memory (default 100)",
    )
    p.add_argument(
        "--memory-only",
        action="store_true",
        help="measure only the worker's peak memory per kind, into the existing --out file "
        "(its other figures kept)",
    )
    p.add_argument("--out", type=Path, default=Path("bench/results/cost.json"))
    p.add_argument("--data-dir", type=Path, default=Path(".tasklease/cost"))
    return p.parse_args(argv)


def shared_batch_size() -> int:
    return int(
        json.loads((ROOT / "app" / "settings" / "shared_settings.json").read_text())["batch_size"]
    )


class Run:
    """The stack and the three functions, cold-started in this process."""

    def __init__(self, stack: BenchStack, key: str) -> None:
        self.stack = stack
        self.key = key
        self.logs = Bytes()
        with self.quiet():
            self.api = cold_start("handlers.api")
            self.worker = cold_start("handlers.worker")
            self.sweeper = cold_start("handlers.sweeper")
        for h in logging.getLogger().handlers:
            if isinstance(h, logging.StreamHandler):
                h.setStream(self.logs)  # type: ignore[arg-type]
        assert stack.urls is not None
        self.source = EventSource(stack.endpoint, stack.urls.queue_url)
        self.pg = PgStats(stack)
        self.base = 0  # pg_stat_database's commits at the last reset

    @contextlib.contextmanager
    def quiet(self) -> Any:
        """The functions' stdout (EMF metric lines) counted, not printed."""
        with contextlib.redirect_stdout(self.logs):  # type: ignore[type-var]
            yield

    def invoke(self, fn: Any, event: dict[str, Any]) -> tuple[Any, float]:
        with self.quiet():
            return timed(fn, event, Context())

    def counted(self) -> tuple[dict[str, dict[str, int]], int, int]:
        """SQS calls by action (the proxy), PostgreSQL round trips, log bytes since the
        last call; then the counters start again."""
        sqs = self.stack.counts()
        statements = self.pg.read(self.base, wait=0)["statements"]
        logged = self.logs.n
        self.reset()
        return sqs, sum(c for _, c in statements), logged

    def reset(self) -> None:
        self.stack.reset_counts()
        self.base = self.pg.reset()
        self.logs.n = 0

    # --- phases ---------------------------------------------------------------------

    def submit(self, kind: str, jobs: int, per_request: int) -> Timings:
        t = Timings()
        body = {"kind": kind, "payload": PAYLOADS[kind]}
        for i in range(math.ceil(jobs / per_request)):
            size = min(per_request, jobs - i * per_request)
            path, doc = (
                ("/v1/jobs", body)
                if per_request == 1
                else ("/v1/jobs/batch", {"jobs": [body] * size})
            )
            resp, ms = self.invoke(self.api.handler, api_event("POST", path, doc, self.key))
            if resp.get("statusCode") not in (200, 201, 202):
                raise RuntimeError(f"{path} answered {resp.get('statusCode')}: {resp.get('body')}")
            t.add(ms)
        return t

    def drain(self, jobs: int, max_messages: int) -> Timings:
        t = Timings()
        done, empty = 0, 0
        while done < jobs:
            records = self.source.receive(max_messages)
            if not records:
                empty += 1
                if empty > 15:
                    raise RuntimeError(f"the queue went quiet with {jobs - done} jobs left")
                continue
            resp, ms = self.invoke(self.worker.handler, {"Records": records})
            t.add(ms)
            self.source.records += len(records)
            self.source.delete(records, resp["batchItemFailures"])
            done += len(records) - len(resp["batchItemFailures"])
        return t

    def measure(self, kind: str, jobs: int, per_request: int, max_messages: int) -> dict[str, Any]:
        self.reset()
        api_t = self.submit(kind, jobs, per_request)
        api_sqs, api_pg, api_logs = self.counted()
        self.source.receives = self.source.deletes = self.source.records = 0
        worker_t = self.drain(jobs, max_messages)
        worker_sqs, worker_pg, worker_logs = self.counted()
        return {
            "jobs": jobs,
            "jobs_per_request": per_request,
            "max_records_per_invocation": max_messages,
            "api": {
                **api_t.summary(),
                "sqs": api_sqs,
                "pg_round_trips": api_pg,
                "log_bytes": api_logs,
            },
            "worker": {
                **worker_t.summary(),
                "sqs": worker_sqs,
                "pg_round_trips": worker_pg,
                "log_bytes": worker_logs,
                "event_source": self.source.counts(),
            },
        }

    def worker_memory(self, kind: str, jobs: int, max_messages: int) -> dict[str, Any]:
        """The peak memory of a fresh worker process running ``jobs`` jobs of ``kind`` in
        backlog batches (bench/cost_memory.py)."""
        self.submit(kind, jobs, 10)
        self.reset()
        return cost_memory.measure(self.source, jobs, max_messages)

    def idle_sweeps(self, n: int) -> dict[str, Any]:
        self.invoke(self.sweeper.handler, SCHEDULER_INPUT)  # the first pass may find work
        self.reset()
        t = Timings()
        for _ in range(n):
            _, ms = self.invoke(self.sweeper.handler, SCHEDULER_INPUT)
            t.add(ms)
        sqs, pg, logs = self.counted()
        return {**t.summary(), "sqs": sqs, "pg_round_trips": pg, "log_bytes": logs}

    def sizes(self, kind: str) -> dict[str, float]:
        """Mean bytes of a job's payload, its effects' results and its result (JSON text):
        what a durable function would checkpoint."""
        with psycopg.connect(self.stack.database_url, autocommit=True) as conn:
            row = conn.execute(
                "SELECT avg(octet_length(payload::text)) AS bench_own, "
                "avg(octet_length(coalesce(result::text, ''))), "
                "(SELECT avg(s) FROM (SELECT sum(octet_length(e.result::text)) AS s FROM effects e "
                " JOIN jobs j2 ON j2.id = e.job_id WHERE j2.kind = %s GROUP BY e.job_id) x) "
                "FROM jobs WHERE kind = %s AND state = 'succeeded'",
                (kind, kind),
            ).fetchone()
        assert row is not None
        return {
            "payload_bytes": round(float(row[0] or 0), 1),
            "result_bytes": round(float(row[1] or 0), 1),
            "effect_results_bytes": round(float(row[2] or 0), 1),
        }

    def close(self) -> None:
        from handlers import runtime

        with contextlib.suppress(Exception), self.quiet():
            if self.worker._engine is not None:
                runtime.run(self.worker._engine.close)
            if self.sweeper._clients is not None:
                db, queue = self.sweeper._clients
                runtime.run(db.close)
                runtime.run(queue.close)
            loop = asyncio.get_event_loop_policy().get_event_loop()
            loop.run_until_complete(self.api.app.state.runtime.close())


def lambda_env(stack: BenchStack, batch_size: int) -> dict[str, str]:
    """The functions' configuration: the stack's database and queues (the SQS endpoint is
    the counting proxy), the deployment's batch size, a model that answers at once."""
    assert stack.urls is not None
    return {
        **stack.process_env(stack.urls, stack.queue_name, stack.proxy_url),
        "TASKLEASE_BATCH_SIZE": str(batch_size),
        "TASKLEASE_FAKE_MODEL_LATENCY_MS": "0",
        "TASKLEASE_WORKER_ID": "lambda-worker",
        "TASKLEASE_LOG_LEVEL": "INFO",
        # Measured: the cost of a job, not the per-tenant limits.
        "TASKLEASE_RATE_LIMIT_PER_SECOND": "100000",
        "TASKLEASE_RATE_LIMIT_BURST": "1000000",
        "TASKLEASE_MAX_JOBS_IN_FLIGHT": "100000000",
    }


def measure_all(run: Run, args: argparse.Namespace, batch: int) -> dict[str, Any]:
    kinds: dict[str, Any] = {}
    for kind in PAYLOADS:
        # Warm: each kind's first jobs pay first-use costs (imports, prepared statements)
        # that are per execution environment, not per job.
        run.measure(kind, 10, 1, batch)
        run.measure(kind, 10, 10, 1)
        single, batched, trickle = [], [], []
        for i in range(args.rounds):
            err.print(f"[bold]{kind}[/], round {i + 1}/{args.rounds}…")
            single.append(run.measure(kind, args.jobs, 1, batch))
            batched.append(run.measure(kind, args.jobs, 10, batch))
            trickle.append(run.measure(kind, args.trickle_jobs, 1, 1))
        kinds[kind] = {
            "model_calls_per_job": MODEL_CALLS[kind],
            "effects_per_job": EFFECTS[kind],
            "single": combine(single),
            "batch": combine(batched),
            "one_per_invocation": combine(trickle),
            **run.sizes(kind),
        }
    for kind in PAYLOADS:
        err.print(f"[bold]{kind}[/]: the worker's peak memory…")
        kinds[kind]["worker_memory"] = run.worker_memory(kind, args.memory_jobs, batch)
    return kinds


MEMORY_NOTE = "worker_memory: "


def memory_note(args: argparse.Namespace, batch: int) -> str:
    return (
        f"{MEMORY_NOTE}per kind, {args.memory_jobs} jobs in batches of {batch} through a "
        "fresh process that imports only handlers.worker (bench/cost_memory.py); its peak "
        "resident set (VmHWM): what Lambda reports as Max Memory Used, less the runtime's "
        "own share"
    )


def memory_only(run: Run, args: argparse.Namespace, batch: int) -> dict[str, Any]:
    """The figures file at --out with each kind's worker memory measured again."""
    figures: dict[str, Any] = json.loads(args.out.read_text())
    for kind in figures["kinds"]:
        if kind not in PAYLOADS:
            raise Unavailable(f"{args.out}: kind {kind!r} has no payload in bench/cost.py")
        err.print(f"[bold]{kind}[/]: the worker's peak memory…")
        figures["kinds"][kind]["worker_memory"] = run.worker_memory(kind, args.memory_jobs, batch)
    figures["worker_memory_measured_at"] = dt.datetime.now(dt.UTC).isoformat(timespec="seconds")
    figures["worker_memory_machine"] = report.machine()
    notes = [n for n in figures.get("notes", []) if not n.startswith(MEMORY_NOTE)]
    figures["notes"] = [*notes, memory_note(args, batch)]
    return figures


def main(argv: list[str] | None = None) -> int:
    args = parse(sys.argv[1:] if argv is None else argv)
    warnings.filterwarnings("ignore")
    logging.getLogger("psycopg.pool").setLevel(logging.ERROR)
    batch = shared_batch_size()
    stack = BenchStack("moto", args.data_dir, 1)
    started = dt.datetime.now(dt.UTC).isoformat(timespec="seconds")
    t0 = time.monotonic()
    run: Run | None = None
    try:
        stack.prepare_dir()
        with err.status("starting PostgreSQL, moto's SQS server, the counting proxy…"):
            stack.start_postgres_with_stats()
            stack.start_sqs_with_proxy()
        if not stack.pg_stat_statements:
            raise Unavailable("pg_stat_statements is not available: no round trips to count")
        key = stack.create_key("cost", "make cost")
        os.environ.update(lambda_env(stack, batch))  # read by the handlers at cold start
        run = Run(stack, key)
        if args.memory_only:
            figures = memory_only(run, args, batch)
            return write(args, figures)
        kinds = measure_all(run, args, batch)
        err.print(f"sweeper: {args.sweeps} idle passes…")
        idle = run.idle_sweeps(args.sweeps)
        figures = {
            "figures_version": 2,
            "measured_at": started,
            "machine": report.machine(),
            "argv": " ".join(sys.argv[1:] if argv is None else argv),
            "batch_size": batch,
            "sqs": "moto (embedded) behind bench/proxy.py; PostgreSQL embedded, pg_stat_statements",
            "notes": [
                "handlers run in-process against local servers: AWS's network round trips "
                "(SQS, RDS) are slower than loopback, so billed durations on AWS are higher",
                "the fake model answers at once; the model's latency is the pricing's "
                "--model-seconds",
                "no webhook configured (the Terraform default): support.triage's post "
                "effect records that nothing was delivered",
                "the backlog runs drained a pre-filled queue, so each worker call got "
                f"{batch} jobs; the low-traffic run handed the worker one job per call, as "
                "the event source mapping does when jobs arrive a second or more apart",
                f"each figure: {args.rounds} rounds, counts summed, handler times the "
                "median of the rounds'; every kind warmed first",
                memory_note(args, batch),
            ],
            "kinds": kinds,
            "sweeper_idle": idle,
            "emf_metrics": sorted(run.logs.metrics),
            "total_s": round(time.monotonic() - t0, 1),
        }
    except Unavailable as exc:
        err.print(f"[red]unavailable:[/] {exc}")
        return 3
    finally:
        if run is not None:
            run.close()
        with err.status("stopping every process this started…"):
            stack.stop()
    return write(args, figures)


def write(args: argparse.Namespace, figures: dict[str, Any]) -> int:
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(figures, indent=2) + "\n")
    err.print(f"[green]✓[/] {args.out}")
    print(args.out)  # the only line on stdout: where the figures are, for `make cost`
    return 0


if __name__ == "__main__":
    sys.exit(main())
