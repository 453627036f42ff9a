"""tasklease end to end: jobs submitted through the API, run by the workers, timed from
the first request to the last completion, with what each job cost (CPU, PostgreSQL,
broker requests)."""

from __future__ import annotations

import asyncio
import time
import uuid
from typing import Any

import httpx
import psycopg

from bench import cost_per_job, redis_counts
from bench.cpu_meter import CpuMeter, tasklease_groups
from bench.measure import PgStats, progress, run_pool
from bench.stack import BenchStack


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
            submitting = asyncio.ensure_future(run_pool(requests, clients, submit))
            watching = asyncio.ensure_future(watch(submitting))
            await submitting
            t_submit = time.time() - t0
            bar.update(sub, rate=f"{requests / t_submit:7.1f} req/s")
            await watching
    await asyncio.sleep(0.5)  # the last batch's DeleteMessageBatch (or XACK)
    sqs = stack.counts()
    cpu_ms = cpu.ms_per_job(len(ids))
    pgs = pg.read(base_commits, pg_wait)

    last_done, pct, succeeded, breakdown = await _finished(stack, ids)
    n = len(ids)
    elapsed = last_done - t0
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
        **_broker_counts(stack, sqs, n),
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
        # Where PostgreSQL's time goes: each statement's calls and execution time a job
        # (pg_stat_statements' total_exec_time: its CPU and its waits, commits' fsyncs
        # apart), the costliest first.
        "pg_statements_per_job": sorted(
            (
                {
                    "query": " ".join(q.split())[:110],
                    "per_job": round(c / n, 3),
                    "exec_ms_per_job": round(pgs["exec_ms_by_statement"].get(q, 0.0) / n, 3),
                }
                for q, c in statements
            ),
            key=lambda s: -s["exec_ms_per_job"],
        )[:12],
        "cost_per_job": cost_per_job.measured(cpu_ms, pgs["exec_ms"], n),
    }


async def _finished(
    stack: BenchStack, ids: list[str]
) -> tuple[float, list[float], int, dict[str, float | None]]:
    """When the last job finished, the latency percentiles (50, 95, 99; ms), how many
    succeeded, and the median time of each part of a job's way."""
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
    breakdown = {
        k: round(float(v), 1) if v is not None else None
        for k, v in zip(
            ("accepted_to_leased", "leased_to_running", "running_to_done"), parts, strict=True
        )
    }
    return float(row[0]), list(row[1]), int(row[2]), breakdown


def _broker_counts(stack: BenchStack, sqs: dict[str, Any], n: int) -> dict[str, Any]:
    """The broker requests (or Redis commands) a job made, by action."""
    calls, entries = sqs["calls"], sqs["entries"]
    total_calls = sum(v for k, v in calls.items() if k != "ReceiveMessage(empty)")
    return (
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
    )
