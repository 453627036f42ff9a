"""The raw Redis Streams cycle, the floor tasklease on Redis is compared with: N messages
XADDed (pipelines of 10, the shape of SendMessageBatch), read by a consumer group with
XREADGROUP COUNT 10 BLOCK 1000 and XACKed (one XACK of the batch's ids), no database.

Producers: ``--clients`` coroutines in the benchmark's process (as the API is one
process). Consumers: as many processes as tasklease has workers, each with as many
consumers as a worker has batches in flight, started and connected before the clock
starts: in Python the client, not Redis, is the limit, so one process would measure the
benchmark's own interpreter rather than the cycle.
"""

from __future__ import annotations

import asyncio
import multiprocessing as mp
import time
import uuid
from multiprocessing.sharedctypes import Synchronized
from typing import Any

import redis.asyncio as aioredis

from bench.measure import progress, run_pool
from bench.stack import BenchStack

GROUP = "raw"
BATCH = 10


async def _consume(
    url: str,
    stream: str,
    name: str,
    concurrency: int,
    n: int,
    done: Synchronized,  # type: ignore[type-arg]
    last: Synchronized,  # type: ignore[type-arg]
    ready: Any,
) -> None:
    client = aioredis.Redis.from_url(url, decode_responses=True, max_connections=concurrency + 1)
    try:
        await client.ping()
        ready.set()

        async def loop(i: int) -> None:
            consumer = f"{name}-{i}"
            while done.value < n:
                answer = await client.xreadgroup(
                    GROUP, consumer, {stream: ">"}, count=BATCH, block=1000
                )
                ids = [entry_id for _, entries in answer or [] for entry_id, _ in entries]
                if not ids:
                    continue
                await client.xack(stream, GROUP, *ids)
                with done.get_lock():
                    done.value += len(ids)
                    last.value = time.time()

        await asyncio.gather(*(loop(i) for i in range(concurrency)))
    finally:
        await client.aclose()


def consumer_process(
    url: str,
    stream: str,
    name: str,
    concurrency: int,
    n: int,
    done: Synchronized,  # type: ignore[type-arg]
    last: Synchronized,  # type: ignore[type-arg]
    ready: Any,
) -> None:
    asyncio.run(_consume(url, stream, name, concurrency, n, done, last, ready))


async def raw_cycle(
    stack: BenchStack, n: int, producers: int, processes: int, concurrency: int
) -> dict[str, Any]:
    """XADD (pipelines of 10) / XREADGROUP (10, BLOCK 1 s) / XACK, ``processes`` x
    ``concurrency`` consumers: messages per second, and the commands per message."""
    url = stack.redis_url
    stream = f"{stack.queue_name}-raw"
    client = aioredis.Redis.from_url(url, decode_responses=True, max_connections=producers + 2)
    ctx = mp.get_context("spawn")
    done = ctx.Value("q", 0)
    last = ctx.Value("d", 0.0)
    readies = [ctx.Event() for _ in range(processes)]
    procs = [
        ctx.Process(
            target=consumer_process,
            args=(url, stream, f"raw{p}", concurrency, n, done, last, readies[p]),
            daemon=True,
        )
        for p in range(processes)
    ]
    try:
        await client.xgroup_create(stream, GROUP, id="0", mkstream=True)
        for proc in procs:
            proc.start()
        deadline = time.monotonic() + 60
        while not all(r.is_set() for r in readies):
            if time.monotonic() > deadline or any(p.exitcode is not None for p in procs):
                raise RuntimeError("the raw cycle's consumer processes did not start")
            await asyncio.sleep(0.05)
        await asyncio.sleep(0.2)  # each one's first XREADGROUP is blocked before the clock starts
        stack.reset_counts()
        batches = [range(i, min(i + BATCH, n)) for i in range(0, n, BATCH)]
        with progress() as bar:
            task = bar.add_task("raw XADD/XREADGROUP/XACK", total=n, rate="")
            t0 = time.time()

            async def send(i: int) -> None:
                async with client.pipeline(transaction=False) as pipe:
                    for _ in batches[i]:
                        # The size of a tasklease message: a job id and when it was sent.
                        body = f'{{"job_id": "{uuid.uuid4()}"}}'
                        pipe.xadd(stream, {"b": body, "t": str(int(time.time() * 1000))})
                    await pipe.execute()

            sending = asyncio.ensure_future(run_pool(len(batches), producers, send))
            while done.value < n:
                await asyncio.sleep(0.05)
                el = time.time() - t0
                bar.update(task, completed=done.value, rate=f"{done.value / el:7.1f} msgs/s")
                if el > 300:
                    raise TimeoutError(f"raw cycle: {done.value}/{n} acknowledged in 300 s")
                if sending.done() and sending.exception() is not None:
                    raise RuntimeError(f"raw cycle: XADD failed: {sending.exception()}")
            await sending
            elapsed = last.value - t0
            bar.update(task, completed=n, rate=f"{n / elapsed:7.1f} msgs/s")
        calls = stack.counts()["calls"]
        for proc in procs:
            proc.join(timeout=5)
    finally:
        for proc in procs:
            if proc.is_alive():
                proc.terminate()
                proc.join(timeout=5)
        await client.delete(stream)
        await client.aclose()
    return {
        "messages": n,
        "producers": producers,
        "consumers": processes * concurrency,
        "consumer_processes": processes,
        "elapsed_s": round(elapsed, 3),
        "msgs_per_s": round(n / elapsed, 1),
        "redis_commands": calls,
        "redis_commands_per_message": {k: round(v / n, 3) for k, v in calls.items()},
        "cycle": "XADD x10 (pipeline) / XREADGROUP COUNT 10 BLOCK 1000 / XACK (batch ids)",
    }
