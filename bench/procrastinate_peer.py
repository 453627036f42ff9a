"""The "just Postgres" peer: procrastinate 3.x (psycopg 3) on the benchmark's embedded
PostgreSQL, in a database of its own (``bench_procrastinate``), with the same no-op task.

N worker processes (``procrastinate worker --concurrency C``, its CLI, as its docs run it)
where tasklease runs N; C is the jobs a tasklease worker holds at once (its batches in
flight times the batch size). ``--clients`` coroutines in one process defer the jobs, as
tasklease's clients submit theirs. Measured from procrastinate's own tables and from
pg_stat_statements: jobs/s (first defer → last ``succeeded`` event), latency (each job's
``succeeded`` event less its ``deferred`` one), statements and commits per job.

A job whose worker is SIGKILLed stays in ``doing``: procrastinate re-runs it only if the
application runs the periodic task its docs give (jobs of workers without a heartbeat for
30 s, ``JobManager.get_stalled_jobs`` then ``retry_job``), and then at least once, with no
record of what the first run did:
https://procrastinate.readthedocs.io/en/stable/howto/production/retry_stalled_jobs.html
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
from typing import Any

import psycopg
from procrastinate import App, PsycopgConnector
from psycopg import sql
from rich.console import Console

from app.tools.stack.embedded import terminate
from bench import cost_per_job
from bench.cpu_meter import SELF, CpuMeter, pg_server_pids
from bench.measure import OWN, progress  # OWN: the alias on our own statements
from bench.stack import BenchStack

err = Console(stderr=True)
DATABASE = "bench_procrastinate"
DSN_ENV = "BENCH_PROCRASTINATE_DSN"
POOL_ENV = "BENCH_PROCRASTINATE_POOL"

# The connector opens its pool when the app is opened (the CLI does it in the workers).
app = App(
    connector=PsycopgConnector(
        conninfo=os.environ.get(DSN_ENV, ""),
        min_size=1,
        max_size=int(os.environ.get(POOL_ENV, "4")),
    )
)


@app.task(name="bench.noop")
async def noop() -> dict[str, bool]:
    return {"ok": True}


def _database(stack: BenchStack) -> str:
    """A fresh database for procrastinate in the embedded server, its schema applied: its URL."""
    assert stack.postgres is not None
    with psycopg.connect(stack.postgres.admin_url, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP DATABASE IF EXISTS {}").format(sql.Identifier(DATABASE)))
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(DATABASE)))
    url = psycopg.conninfo.make_conninfo(stack.database_url, dbname=DATABASE)
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(app.schema_manager.get_schema())
    return url


def _stats(stack: BenchStack) -> dict[str, Any]:
    """procrastinate's database in pg_stat_statements (top level, ours left out) and its
    commits, read through the tasklease database, where the extension lives."""
    with psycopg.connect(stack.database_url, autocommit=True) as conn:
        conn.execute("SELECT pg_stat_clear_snapshot() AS bench_own")
        row = conn.execute(
            "SELECT xact_commit AS bench_own FROM pg_stat_database WHERE datname = %s", (DATABASE,)
        ).fetchone()
        statements = conn.execute(
            "SELECT s.query, s.calls, s.total_exec_time AS bench_own FROM pg_stat_statements s "
            "JOIN pg_database d ON d.oid = s.dbid AND d.datname = %s "
            "WHERE s.toplevel AND s.query NOT LIKE %s ORDER BY s.calls DESC",
            (DATABASE, f"%{OWN}%"),
        ).fetchall()
    return {"commits": int(row[0]) if row else 0, "statements": statements}


def _reset(stack: BenchStack) -> None:
    with psycopg.connect(stack.database_url, autocommit=True) as conn:
        conn.execute("SELECT pg_stat_statements_reset() AS bench_own")


def _workers(
    stack: BenchStack, url: str, workers: int, concurrency: int
) -> list[subprocess.Popen[bytes]]:
    env = {**os.environ, DSN_ENV: url, POOL_ENV: str(concurrency + 1)}
    procs = []
    for i in range(workers):
        fh = stack.log(f"procrastinate-{i}")
        args = [sys.executable, "-m", "procrastinate", "--app", "bench.procrastinate_peer.app"]
        args += ["worker", "--concurrency", str(concurrency), "--name", f"bench{i}"]
        procs.append(
            subprocess.Popen(  # noqa: S603 - our own interpreter
                args, stdout=fh, stderr=fh, env=env, start_new_session=True
            )
        )
    return procs


def _wait_ready(url: str, workers: int, procs: list[subprocess.Popen[bytes]]) -> bool:
    """Until each worker has registered (procrastinate_workers), or one exits."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and all(p.poll() is None for p in procs):
        with psycopg.connect(url, autocommit=True) as conn:
            row = conn.execute("SELECT count(*) AS bench_own FROM procrastinate_workers").fetchone()
        if row and row[0] >= workers:
            return True
        time.sleep(0.2)
    return False


async def _defer(url: str, jobs: int, clients: int) -> float:
    """``clients`` coroutines deferring the jobs; the time the first was sent."""
    counter = iter(range(jobs))
    pool = PsycopgConnector(conninfo=url, min_size=clients, max_size=clients)

    async def client() -> None:
        for _ in counter:
            await noop.defer_async()

    with app.replace_connector(pool):
        async with app.open_async():
            t0 = time.time()
            await asyncio.gather(*(client() for _ in range(clients)))
    return t0


def _progress(url: str, jobs: int, label: str) -> None:
    with progress() as bar, psycopg.connect(url, autocommit=True) as conn:
        task = bar.add_task(label, total=jobs, rate="")
        t0 = time.perf_counter()
        while True:
            row = conn.execute(
                "SELECT count(*) AS bench_own FROM procrastinate_jobs WHERE status = 'succeeded'"
            ).fetchone()
            done = int(row[0]) if row else 0
            bar.update(
                task, completed=done, rate=f"{done / (time.perf_counter() - t0):7.1f} jobs/s"
            )
            if done >= jobs or time.perf_counter() - t0 > 120:
                return
            time.sleep(0.1)


def _timeline(url: str) -> tuple[int, float | None, list[float]]:
    """Jobs succeeded, the last one's epoch, and each one's deferred → succeeded in ms."""
    with psycopg.connect(url, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT extract(epoch FROM s.at), "
            "extract(epoch FROM s.at - d.at) * 1000 AS bench_own "
            "FROM procrastinate_events s JOIN procrastinate_events d "
            "ON d.job_id = s.job_id AND d.type = 'deferred' WHERE s.type = 'succeeded'"
        ).fetchall()
    last = max((float(r[0]) for r in rows), default=None)
    return len(rows), last, sorted(float(r[1]) for r in rows)


def _pct(ms: list[float]) -> dict[str, float | None]:
    q = {"p50": 0.5, "p95": 0.95, "p99": 0.99}
    return {
        k: round(ms[min(len(ms) - 1, int(v * len(ms)))], 1) if ms else None for k, v in q.items()
    }


def run(
    stack: BenchStack, jobs: int, workers: int, clients: int, concurrency: int
) -> dict[str, Any]:
    """The phase: N no-op jobs through procrastinate; its figures."""
    if stack.postgres is None:
        return {"skipped": "needs the embedded PostgreSQL", "jobs_per_s": None}
    import procrastinate

    url = _database(stack)
    procs = _workers(stack, url, workers, concurrency)
    try:
        if not _wait_ready(url, workers, procs):
            return {"skipped": f"procrastinate workers did not start (logs {stack.logs})"}
        _reset(stack)
        base = _stats(stack)["commits"]
        groups = {"workers": [p.pid for p in procs], "pg_server": pg_server_pids(stack)}
        meter = CpuMeter(groups).start()
        producer = CpuMeter({"producer": [SELF]}).start()
        t0 = asyncio.run(_defer(url, jobs, clients))
        t_submit = time.time() - t0
        sending = producer.ms_per_job(jobs)
        _progress(url, jobs, "procrastinate: done")
        stats = _stats(stack)
        cpu_s = meter.seconds()
    finally:
        terminate(procs, grace=10)
    # A backend flushes its commit counts when it exits: read them once the workers are gone.
    time.sleep(0.5)
    commits = _stats(stack)["commits"] - base
    done, last, ms = _timeline(url)
    elapsed = (last - t0) if last else None
    total = sum(int(c) for _, c, _ in stats["statements"])
    per = max(1, done)
    cpu_ms = {
        f"{k}_cpu_ms": round(v * 1000 / per, 3) if v is not None else None for k, v in cpu_s.items()
    }
    return {
        "version": procrastinate.__version__,
        "database": f"{DATABASE} (a database of its own in the same embedded PostgreSQL)",
        "config": {
            "worker processes": workers,
            "--concurrency (jobs at once per worker)": concurrency,
            "connection pool per worker (max)": concurrency + 1,
            "listen_notify": True,
            "clients deferring (defer_async, one pool)": clients,
        },
        "jobs": jobs,
        "done": done,
        "elapsed_s": round(elapsed, 3) if elapsed else None,
        "jobs_per_s": round(done / elapsed, 1) if elapsed else None,
        "defer_per_s": round(jobs / t_submit, 1),
        "latency_ms": _pct(ms),
        "pg_round_trips_per_job": round(total / max(1, done), 2),
        "pg_commits_per_job": round(commits / max(1, done), 2),
        "pg_commits_note": "includes the workers' shutdown (read after they exit)",
        "pg_statements_per_job": [
            {"per_job": round(int(c) / max(1, done), 3), "query": " ".join(str(q).split())[:160]}
            for q, c, _ in stats["statements"][:8]
        ],
        # Its queue is PostgreSQL: no broker requests, no broker server.
        "cost_per_job": cost_per_job.measured(
            cpu_ms | {"producer_cpu_ms": sending["producer_cpu_ms"], "broker_server_cpu_ms": 0.0},
            sum(float(t) for _, _, t in stats["statements"]),
            per,
            producer="producer",
            producer_jobs=jobs,
        )
        | {
            "broker_requests": 0,
            "note": f"its queue is PostgreSQL: {round(total / per, 2)} statements/job, no broker",
        },
    }
