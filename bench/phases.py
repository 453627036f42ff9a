"""The measured phases: tasklease end to end, the raw broker cycle, the raw database cycle."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Callable
from typing import Any

import httpx
import psycopg
from aiobotocore.session import get_session
from botocore.config import Config
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from bench import cost_per_job, redis_counts
from bench.cpu_meter import CpuMeter, tasklease_groups
from bench.stack import BenchStack

err = Console(stderr=True)
OWN = "bench_own"  # an alias on the benchmark's own statements: left out of the per-job counts


def progress() -> Progress:
    return Progress(
        TextColumn("{task.description:<26}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.fields[rate]}"),
        TimeElapsedColumn(),
        console=err,
        transient=False,
    )


async def _run_pool(n: int, concurrency: int, fn: Callable[[int], Any]) -> None:
    counter = iter(range(n))

    async def loop() -> None:
        for i in counter:
            await fn(i)

    await asyncio.gather(*(loop() for _ in range(concurrency)))


# --- PostgreSQL statistics ------------------------------------------------------


class PgStats:
    """Snapshots of pg_stat_database.xact_commit and pg_stat_statements for the bench DB."""

    def __init__(self, stack: BenchStack) -> None:
        self.url = stack.database_url
        self.statements = stack.pg_stat_statements
        self.own = 0  # our own transactions between reset and read

    def reset(self) -> int:
        with psycopg.connect(self.url, autocommit=True) as conn:
            if self.statements:
                conn.execute("SELECT pg_stat_statements_reset() AS bench_own")
            conn.execute("SELECT pg_stat_clear_snapshot() AS bench_own")
            row = conn.execute(
                "SELECT xact_commit AS bench_own FROM pg_stat_database WHERE datname = current_database()"
            ).fetchone()
        self.own = 0
        return int(row[0]) if row else 0

    def read(self, base_commits: int, wait: float) -> dict[str, Any]:
        # An idle backend flushes its transaction counts to pg_stat_database only after
        # 10 s (PGSTAT_IDLE_INTERVAL); pg_stat_statements counts at once.
        time.sleep(wait)
        with psycopg.connect(self.url, autocommit=True) as conn:
            row = conn.execute(
                "SELECT xact_commit AS bench_own FROM pg_stat_database WHERE datname = current_database()"
            ).fetchone()
            statements: list[tuple[str, int]] = []
            exec_ms: float | None = None
            if self.statements:
                found = conn.execute(
                    "SELECT s.query, s.calls, s.total_exec_time AS bench_own "
                    "FROM pg_stat_statements s "
                    "JOIN pg_database d ON d.oid = s.dbid AND d.datname = current_database() "
                    "WHERE s.query NOT LIKE %s ORDER BY s.calls DESC",
                    ("%bench_own%",),
                ).fetchall()
                statements = [(str(q), int(c)) for q, c, _ in found]
                exec_ms = sum(float(t) for _, _, t in found)
        commits = (int(row[0]) if row else 0) - base_commits - self.own - 2  # our 2 snapshots
        return {"commits": max(0, commits), "statements": statements, "exec_ms": exec_ms}


# --- tasklease end to end -------------------------------------------------------


async def _workers_polling(stack: BenchStack, within: float = 60) -> None:
    """Until every worker polls the queue (its ready mark), at most ``within`` seconds."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if all(p.ready_path is not None and p.ready_path.exists() for p in stack.workers):
            return
        await asyncio.sleep(0.1)


async def tasklease_e2e(
    stack: BenchStack,
    jobs: int,
    clients: int,
    label: str,
    *,
    pace_s: float = 0.0,
    pg_wait: float = 0.0,
    submit_batch: int = 1,
) -> dict[str, Any]:
    """N demo.noop jobs through POST /v1/jobs (``submit_batch`` > 1: that many per
    POST /v1/jobs/batch); ``pace_s`` > 0 sends request i at t0 + i·pace_s (a light load)
    instead of as fast as the clients go."""
    await _workers_polling(stack)  # their start-up's imports are not a job's cost
    pg = PgStats(stack)
    base_commits = pg.reset()
    stack.reset_counts()
    cpu = CpuMeter(tasklease_groups(stack)).start()
    ids: list[str] = []
    submit_ms: list[float] = []
    errors = 0
    body = {"kind": "demo.noop", "payload": {}}

    with progress() as bar:
        sub = bar.add_task(f"{label}: submit", total=jobs, rate="")
        done_task = bar.add_task(f"{label}: done", total=jobs, rate="")
        t0 = time.time()
        limits = httpx.Limits(max_connections=clients, max_keepalive_connections=clients)
        async with httpx.AsyncClient(
            base_url=stack.api_url, timeout=30, limits=limits, headers=stack.api_headers
        ) as http:

            async def submit(i: int) -> None:
                nonlocal errors
                if pace_s:
                    await asyncio.sleep(max(0.0, t0 + i * pace_s - time.time()))
                size = min(submit_batch, jobs - i * submit_batch)
                path, payload = (
                    ("/v1/jobs", body)
                    if submit_batch == 1
                    else ("/v1/jobs/batch", {"jobs": [body] * size})
                )
                for _attempt in range(5):
                    s = time.perf_counter()
                    try:
                        resp = await http.post(path, json=payload)
                    except httpx.HTTPError:
                        resp = None
                    if resp is not None and resp.status_code == 202:
                        submit_ms.append((time.perf_counter() - s) * 1000)
                        answer = resp.json()
                        made = (
                            [j["id"] for j in answer["jobs"]]
                            if submit_batch > 1
                            else [answer["id"]]
                        )
                        ids.extend(made)
                        bar.advance(sub, len(made))
                        return
                    errors += 1
                    await asyncio.sleep(0.2)

            async def watch(submitting: asyncio.Task[None]) -> float:
                conn = await psycopg.AsyncConnection.connect(stack.database_url, autocommit=True)
                async with conn:
                    while True:
                        await asyncio.sleep(0.25)
                        cur = await conn.execute(
                            "SELECT count(*) AS bench_own FROM jobs WHERE state = 'succeeded' "
                            "AND created_at >= to_timestamp(%s)",
                            (t0 - 0.2,),
                        )
                        pg.own += 1
                        row = await cur.fetchone()
                        n = int(row[0]) if row else 0
                        el = time.time() - t0
                        bar.update(done_task, completed=n, rate=f"{n / el:7.1f} jobs/s")
                        if submitting.done() and n >= len(ids):
                            return time.time()
                        if time.time() - t0 > 900:
                            raise TimeoutError(f"{label}: only {n}/{len(ids)} jobs done in 900 s")
                        if any(p.poll() is not None for p in stack.workers):
                            raise RuntimeError(f"a worker exited (logs in {stack.logs})")

            requests = -(-jobs // submit_batch)
            submitting = asyncio.ensure_future(_run_pool(requests, clients, submit))
            watching = asyncio.ensure_future(watch(submitting))
            await submitting
            t_submit = time.time() - t0
            bar.update(sub, rate=f"{requests / t_submit:7.1f} req/s")
            await watching
    await asyncio.sleep(0.5)  # the last batch's DeleteMessageBatch (or XACK)
    sqs = stack.counts()
    cpu_ms = cpu.ms_per_job(len(ids))
    pgs = pg.read(base_commits, pg_wait)

    conn = await psycopg.AsyncConnection.connect(stack.database_url, autocommit=True)
    async with conn:
        cur = await conn.execute(
            "SELECT extract(epoch FROM max(finished_at)) AS bench_own, "
            "percentile_cont(ARRAY[0.5, 0.95, 0.99]) WITHIN GROUP "
            "(ORDER BY extract(epoch FROM finished_at - created_at) * 1000), "
            "count(*) FILTER (WHERE state = 'succeeded') "
            "FROM jobs WHERE id = ANY(%s)",
            ([uuid.UUID(i) for i in ids],),
        )
        row = await cur.fetchone()
        # Where the time goes, from the job's own timeline: accepted (the row's commit
        # time, near enough) -> leased (send, the long poll's wake-up, receive, claim)
        # -> running (the start statement) -> succeeded (the run and the completion).
        cur = await conn.execute(
            "WITH t AS (SELECT j.created_at AS accepted, "
            "  max(e.at) FILTER (WHERE e.to_state = 'leased') AS leased, "
            "  max(e.at) FILTER (WHERE e.to_state = 'running') AS running, "
            "  j.finished_at AS done FROM jobs j JOIN job_events e ON e.job_id = j.id "
            "  WHERE j.id = ANY(%s) GROUP BY j.id) "
            "SELECT percentile_cont(0.5) WITHIN GROUP "
            "  (ORDER BY extract(epoch FROM leased - accepted) * 1000) AS bench_own, "
            "percentile_cont(0.5) WITHIN GROUP (ORDER BY extract(epoch FROM running - leased) * 1000), "
            "percentile_cont(0.5) WITHIN GROUP (ORDER BY extract(epoch FROM done - running) * 1000) "
            "FROM t",
            ([uuid.UUID(i) for i in ids],),
        )
        parts = await cur.fetchone()
    assert row is not None
    assert parts is not None
    last_done, pct, succeeded = float(row[0]), list(row[1]), int(row[2])
    breakdown = {
        k: round(float(v), 1) if v is not None else None
        for k, v in zip(
            ("accepted_to_leased", "leased_to_running", "running_to_done"), parts, strict=True
        )
    }
    n = len(ids)
    elapsed = last_done - t0
    calls, entries = sqs["calls"], sqs["entries"]
    total_calls = sum(v for k, v in calls.items() if k != "ReceiveMessage(empty)")
    statements = pgs["statements"]
    stmt_calls = sum(c for _, c in statements)
    submit_ms.sort()
    return {
        "jobs": n,
        "succeeded": succeeded,
        "submit_errors": errors,
        "workers": len(stack.workers),
        "elapsed_s": round(elapsed, 3),
        "jobs_per_s": round(n / elapsed, 1),
        "submit_batch": submit_batch,
        "api_submit_req_per_s": round(requests / t_submit, 1),
        "api_submit_jobs_per_s": round(n / t_submit, 1),
        "latency_p50_breakdown_ms": breakdown,
        "api_submit_ms_p50": round(submit_ms[len(submit_ms) // 2], 1) if submit_ms else None,
        "latency_ms": {
            k: round(float(v), 1) for k, v in zip(("p50", "p95", "p99"), pct, strict=True)
        },
        **(
            {"redis_commands_per_job": redis_counts.per_job(calls, n), "redis_commands": calls}
            if stack.on_redis
            else {
                "sqs_requests_per_job": {
                    "by_action": {k: round(v / n, 3) for k, v in sorted(calls.items())},
                    "total": round(total_calls / n, 3),
                },
                "sqs_requests": calls,
                "sqs_entries_per_call": {
                    k: round(entries.get(k, 0) / v, 2)
                    for k, v in sorted(calls.items())
                    if v and k in entries
                },
            }
        ),
        "pg_round_trips_per_job": round(stmt_calls / n, 2) if statements else None,
        "pg_commits_per_job": round(pgs["commits"] / n, 2) if pg_wait >= 10 else None,
        # Every statement here is autocommit, so each pool check (an empty query) is a
        # commit too: commits ≈ statements + checks ≈ the round trips really made.
        "pg_round_trips_per_job_incl_pool_checks": (
            round(max(stmt_calls, pgs["commits"]) / n, 2) if statements and pg_wait >= 10 else None
        ),
        "pg_source": (
            "round trips = top-level statements counted by pg_stat_statements (each one a "
            "client round trip; BEGIN/COMMIT would be included); commits = "
            "pg_stat_database.xact_commit delta less the benchmark's own, read after the 10 s "
            "idle flush. Not counted as a round trip: psycopg_pool's check on each checkout "
            "(an empty query, invisible to pg_stat_statements, but a round trip and a commit)."
            if statements
            else "pg_stat_statements unavailable: commits from pg_stat_database.xact_commit only"
        ),
        "pg_statements_per_job": [
            {"query": " ".join(q.split())[:110], "per_job": round(c / n, 3)}
            for q, c in statements[:12]
        ],
        "cost_per_job": cost_per_job.measured(cpu_ms, pgs["exec_ms"], n),
    }


# --- the raw broker cycle -------------------------------------------------------


async def broker_limit(stack: BenchStack, n: int, producers: int, consumers: int) -> dict[str, Any]:
    """SendMessageBatch of 10, ReceiveMessage(10, long poll 1 s), DeleteMessageBatch; no DB.
    Through the same counting proxy as tasklease, so both pay the same path."""
    url = await stack.new_queue(f"{stack.queue_name}-raw")
    cfg = Config(retries={"mode": "standard", "max_attempts": 3}, max_pool_connections=50)
    session = get_session()
    batches = [list(range(i, min(i + 10, n))) for i in range(0, n, 10)]
    deleted = 0
    stack.reset_counts()
    async with session.create_client(
        "sqs", region_name="us-east-1", endpoint_url=stack.proxy_url, config=cfg
    ) as sqs:
        with progress() as bar:
            task = bar.add_task("broker limit: cycle", total=n, rate="")
            t0 = time.perf_counter()

            async def send(i: int) -> None:
                entries = [{"Id": str(j), "MessageBody": f'{{"n": {j}}}'} for j in batches[i]]
                await sqs.send_message_batch(QueueUrl=url, Entries=entries)

            async def consume() -> None:
                nonlocal deleted
                while deleted < n:
                    resp = await sqs.receive_message(
                        QueueUrl=url, MaxNumberOfMessages=10, WaitTimeSeconds=1
                    )
                    msgs = resp.get("Messages") or []
                    if not msgs:
                        continue
                    entries = [
                        {"Id": str(k), "ReceiptHandle": m["ReceiptHandle"]}
                        for k, m in enumerate(msgs)
                    ]
                    await sqs.delete_message_batch(QueueUrl=url, Entries=entries)
                    deleted += len(msgs)
                    el = time.perf_counter() - t0
                    bar.update(task, completed=deleted, rate=f"{deleted / el:7.1f} msgs/s")

            await asyncio.gather(
                _run_pool(len(batches), producers, send), *(consume() for _ in range(consumers))
            )
            elapsed = time.perf_counter() - t0
    calls = stack.counts()["calls"]
    return {
        "messages": n,
        "producers": producers,
        "consumers": consumers,
        "elapsed_s": round(elapsed, 3),
        "msgs_per_s": round(n / elapsed, 1),
        "sqs_requests": calls,
    }


# --- the raw database cycle -----------------------------------------------------

DB_SCHEMA = """
CREATE TABLE IF NOT EXISTS bench_jobs (
    id uuid PRIMARY KEY, state text NOT NULL, payload jsonb NOT NULL,
    lease_token uuid, created_at timestamptz NOT NULL DEFAULT now(),
    finished_at timestamptz)"""


async def db_limit(stack: BenchStack, n: int, concurrency: int) -> dict[str, Any]:
    """The minimum durable job, three commits: insert, claim, complete (one connection each)."""
    with psycopg.connect(stack.database_url, autocommit=True) as conn:
        conn.execute(DB_SCHEMA)
        conn.execute("TRUNCATE bench_jobs")
    conns = [
        await psycopg.AsyncConnection.connect(stack.database_url, autocommit=True)
        for _ in range(concurrency)
    ]
    free: asyncio.Queue[psycopg.AsyncConnection[Any]] = asyncio.Queue()
    for c in conns:
        free.put_nowait(c)
    done = 0
    try:
        with progress() as bar:
            task = bar.add_task("db limit: 3 commits/job", total=n, rate="")
            t0 = time.perf_counter()

            async def job(_: int) -> None:
                nonlocal done
                conn = await free.get()
                try:
                    jid, token = uuid.uuid4(), uuid.uuid4()
                    await conn.execute(
                        "INSERT INTO bench_jobs (id, state, payload) VALUES (%s, 'queued', '{}')",
                        (jid,),
                        prepare=True,
                    )
                    await conn.execute(
                        "UPDATE bench_jobs SET state = 'leased', lease_token = %s "
                        "WHERE id = %s AND state = 'queued'",
                        (token, jid),
                        prepare=True,
                    )
                    await conn.execute(
                        "UPDATE bench_jobs SET state = 'succeeded', finished_at = now() "
                        "WHERE id = %s AND lease_token = %s",
                        (jid, token),
                        prepare=True,
                    )
                finally:
                    free.put_nowait(conn)
                done += 1
                if done % 50 == 0 or done == n:
                    el = time.perf_counter() - t0
                    bar.update(task, completed=done, rate=f"{done / el:7.1f} jobs/s")

            await _run_pool(n, concurrency, job)
            elapsed = time.perf_counter() - t0
    finally:
        for c in conns:
            await c.close()
    return {
        "jobs": n,
        "concurrency": concurrency,
        "commits_per_job": 3,
        "elapsed_s": round(elapsed, 3),
        "jobs_per_s": round(n / elapsed, 1),
    }


# --- the workers alone: drain a queue filled beforehand -------------------------


async def worker_drain(stack: BenchStack, jobs: int, clients: int, workers: int) -> dict[str, Any]:
    """Submit N jobs with no worker running (the API alone), then start the workers and time
    the drain from the first claim to the last completion (the workers alone)."""
    stack.stop_workers()
    # A stopped worker's long poll lives on in the broker until its wait ends, and takes
    # the first messages sent meanwhile out of sight for a whole visibility timeout: the
    # drain then measured that timeout (55 instead of 370 jobs/s, one run in two).
    await asyncio.sleep(float(stack.env.get("TASKLEASE_WAIT_TIME_SECONDS", "1")) + 1)
    ids: list[str] = []
    body = {"kind": "demo.noop", "payload": {}}
    with progress() as bar:
        sub = bar.add_task("api alone: submit", total=jobs, rate="")
        t0 = time.perf_counter()
        async with httpx.AsyncClient(
            base_url=stack.api_url, timeout=30, headers=stack.api_headers
        ) as http:

            async def submit(_: int) -> None:
                resp = await http.post("/v1/jobs", json=body)
                resp.raise_for_status()
                ids.append(resp.json()["id"])
                bar.advance(sub)

            await _run_pool(jobs, clients, submit)
        api_rate = jobs / (time.perf_counter() - t0)
        bar.update(sub, rate=f"{api_rate:7.1f} req/s")
        stack.reset_counts()
        done_task = bar.add_task("workers alone: drain", total=jobs, rate="")
        stack.set_workers(workers, settle=0)
        uuids = [uuid.UUID(i) for i in ids]
        conn = await psycopg.AsyncConnection.connect(stack.database_url, autocommit=True)
        async with conn:
            deadline = time.monotonic() + 600
            while True:
                await asyncio.sleep(0.25)
                cur = await conn.execute(
                    "SELECT count(*) FILTER (WHERE state = 'succeeded') AS bench_own, "
                    "extract(epoch FROM min(started_at)), extract(epoch FROM max(finished_at)) "
                    "FROM jobs WHERE id = ANY(%s)",
                    (uuids,),
                )
                row = await cur.fetchone()
                assert row is not None
                n = int(row[0])
                if n and row[1] is not None and row[2] is not None:
                    el = max(0.001, float(row[2]) - float(row[1]))
                    bar.update(done_task, completed=n, rate=f"{n / el:7.1f} jobs/s")
                if n >= jobs:
                    break
                if time.monotonic() > deadline:
                    raise TimeoutError(f"drain: {n}/{jobs} done in 600 s")
    await asyncio.sleep(0.5)
    calls = stack.counts()["calls"]
    total = sum(v for k, v in calls.items() if k != "ReceiveMessage(empty)")
    elapsed = float(row[2]) - float(row[1])
    return {
        "jobs": jobs,
        "workers": workers,
        "api_alone_req_per_s": round(api_rate, 1),
        "drain_jobs_per_s": round(jobs / elapsed, 1),
        **(
            {"drain_redis_commands_per_job": redis_counts.per_job(calls, jobs)}
            if stack.on_redis
            else {
                "drain_sqs_requests_per_job": {
                    "by_action": {k: round(v / jobs, 3) for k, v in sorted(calls.items())},
                    "total": round(total / jobs, 3),
                }
            }
        ),
    }


# --- the guarantees under a kill ------------------------------------------------

# Each job of the kill run records this many effects (checkpoints) of this many seconds.
KILL_STEPS, KILL_STEP_SECONDS = 2, 0.02


async def kill_run(stack: BenchStack, jobs: int, clients: int, batch: int) -> dict[str, Any]:
    """The same pipeline with one worker SIGKILLed mid-run (and replaced): every job must
    still succeed exactly once, with each effect recorded once. Its jobs record
    ``KILL_STEPS`` effects each, so a job the kill cut short resumes from its checkpoints
    when its message comes back after the visibility timeout."""
    body = {"kind": "demo.sleep", "payload": {"seconds": KILL_STEP_SECONDS, "steps": KILL_STEPS}}
    ids: list[str] = []
    with progress() as bar:
        sub = bar.add_task("kill run: submit", total=jobs, rate="")
        done_task = bar.add_task("kill run: done", total=jobs, rate="")
        t0 = time.time()
        killed_at: float | None = None
        async with httpx.AsyncClient(
            base_url=stack.api_url, timeout=30, headers=stack.api_headers
        ) as http:

            async def submit(i: int) -> None:
                size = min(batch, jobs - i * batch)
                resp = await http.post("/v1/jobs/batch", json={"jobs": [body] * size})
                resp.raise_for_status()
                ids.extend(j["id"] for j in resp.json()["jobs"])
                bar.advance(sub, size)

            submitting = asyncio.ensure_future(_run_pool(-(-jobs // batch), clients, submit))
            conn = await psycopg.AsyncConnection.connect(stack.database_url, autocommit=True)
            async with conn:
                deadline = time.monotonic() + 600
                while True:
                    await asyncio.sleep(0.1)
                    cur = await conn.execute(
                        "SELECT count(*) FILTER (WHERE state = 'succeeded') AS bench_own, "
                        "count(*) FILTER (WHERE state = 'running') FROM jobs "
                        "WHERE kind = 'demo.sleep' AND created_at >= to_timestamp(%s)",
                        (t0 - 0.2,),
                    )
                    row = await cur.fetchone()
                    assert row is not None
                    n, running = int(row[0]), int(row[1])
                    bar.update(done_task, completed=n, rate=f"{n / (time.time() - t0):7.1f} jobs/s")
                    if killed_at is None and n >= jobs // 4 and running:
                        stack.kill_worker(0)  # mid-job: some of its jobs are running
                        killed_at = time.time() - t0
                    if submitting.done() and n >= len(ids):
                        break
                    if time.monotonic() > deadline:
                        raise TimeoutError(f"kill run: {n}/{len(ids)} done in 600 s")
            await submitting
    elapsed = time.time() - t0
    conn = await psycopg.AsyncConnection.connect(stack.database_url, autocommit=True)
    async with conn:
        cur = await conn.execute(
            "WITH j AS (SELECT id, state, attempt FROM jobs WHERE id = ANY(%s)), "
            "ev AS (SELECT job_id, count(*) AS n FROM job_events "
            "  WHERE to_state = 'succeeded' AND job_id IN (SELECT id FROM j) GROUP BY job_id), "
            "fx AS (SELECT job_id, count(*) AS n, count(DISTINCT key) AS keys FROM effects "
            "  WHERE job_id IN (SELECT id FROM j) GROUP BY job_id) "
            "SELECT (SELECT count(*) FROM j WHERE state <> 'succeeded') AS bench_own, "
            "(SELECT count(*) FROM ev WHERE n > 1), "
            "(SELECT count(*) FROM j WHERE id NOT IN (SELECT job_id FROM fx)) "
            "  + (SELECT count(*) FROM fx WHERE n <> %s OR keys <> %s), "
            "(SELECT count(*) FROM j WHERE attempt > 1)",
            ([uuid.UUID(i) for i in ids], KILL_STEPS, KILL_STEPS),
        )
        row = await cur.fetchone()
    assert row is not None
    return {
        "jobs": len(ids),
        "kind": f"demo.sleep ({KILL_STEPS} effects of {KILL_STEP_SECONDS} s)",
        "killed_at_s": round(killed_at, 2) if killed_at is not None else None,
        "elapsed_s": round(elapsed, 1),
        "not_succeeded": int(row[0]),
        "completed_twice": int(row[1]),
        "effects_not_once": int(row[2]),
        "rerun_after_kill": int(row[3]),
        "visibility_timeout_s": int(stack.env.get("TASKLEASE_VISIBILITY_TIMEOUT_SECONDS", "30")),
    }
