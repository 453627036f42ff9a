"""The limits tasklease is measured against, on the same servers: the raw broker cycle
(send, receive, delete; no database) and the raw database cycle (the minimum durable
job: insert, claim, complete)."""

from __future__ import annotations

import asyncio
import time
import uuid
from typing import Any

import psycopg
from aiobotocore.session import get_session
from botocore.config import Config

from bench.measure import progress, run_pool
from bench.stack import BenchStack


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
                run_pool(len(batches), producers, send), *(consume() for _ in range(consumers))
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

            await run_pool(n, concurrency, job)
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
