"""The phases that check the workers alone: a drain of a queue filled beforehand, and
the guarantees (nothing lost, nothing done twice) with a worker SIGKILLed mid-run."""

from __future__ import annotations

import asyncio
import time
import uuid
from typing import Any

import httpx
import psycopg

from bench import redis_counts
from bench.measure import progress, run_pool
from bench.stack import BenchStack

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

            await run_pool(jobs, clients, submit)
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
    # The sweeper runs, as in production: a worker killed after a commit that wrote an
    # outbox row (a parked job's release) and before its send leaves that row to the
    # relay, and with no relay the run waited for those jobs for ever.
    sweeper = stack.start_sweeper("bench-sweeper")
    try:
        return await _kill_run(stack, jobs, clients, batch)
    finally:
        stack.stop_processes([sweeper])


async def _kill_run(stack: BenchStack, jobs: int, clients: int, batch: int) -> dict[str, Any]:
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

            submitting = asyncio.ensure_future(run_pool(-(-jobs // batch), clients, submit))
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
