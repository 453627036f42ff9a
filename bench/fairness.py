"""Noisy neighbour (issue 16): does one tenant's flood delay another tenant's next job, and
does a high-priority job wait behind a normal backlog?

1. Idle: tenant B submits ``quiet`` demo.noop jobs, paced, on an idle system; each job's
   submit→start (``jobs.created_at`` to its first ``running`` event, both the database's
   clock) is recorded.
2. Flood: tenant A batch-submits ``noisy`` jobs at once; B then submits its ``quiet`` jobs
   again, paced as before. Both tenants' running cap is half the workers' slots
   (`tasklease limits set --max-running`), so A cannot hold every slot, and its window on
   the queue twice that. Target: B's p95 within 2x of idle.
3. Priority: the cap back at its default; tenant C submits ``backlog`` normal jobs at
   once, then ``high`` high-priority jobs, paced; against the same high-priority jobs on
   an idle system. Target: their p95 under a second.

The figures are ratios within one run (flood / idle), never compared across runs.
"""

from __future__ import annotations

import asyncio
import statistics
import time
import uuid
from typing import Any

import httpx
import psycopg

from app import store
from bench.measure import err, progress
from bench.stack import BenchStack

BATCH = 100  # jobs per POST /v1/jobs/batch (the API's most)
TARGET_RATIO = 2.0


def _pct(values: list[float], q: float) -> float | None:
    if not values:
        return None
    if len(values) == 1:
        return round(values[0], 1)
    return round(statistics.quantiles(values, n=100, method="inclusive")[int(q * 100) - 1], 1)


async def _start_latencies(stack: BenchStack, ids: list[str], within: float) -> list[float]:
    """Each job's submit→start in ms, once every one of them has started."""
    deadline = time.monotonic() + within
    query = (
        "SELECT extract(epoch FROM min(e.at) - j.created_at) * 1000 AS bench_own "
        "FROM jobs j JOIN job_events e ON e.job_id = j.id AND e.to_state = 'running' "
        "WHERE j.id = ANY(%s) GROUP BY j.id, j.created_at"
    )
    async with await psycopg.AsyncConnection.connect(stack.database_url, autocommit=True) as c:
        while True:
            rows = await (await c.execute(query, ([uuid.UUID(i) for i in ids],))).fetchall()
            if len(rows) >= len(ids) or time.monotonic() > deadline:
                return [float(r[0]) for r in rows]
            await asyncio.sleep(0.25)


async def _drained(stack: BenchStack, within: float, label: str) -> bool:
    """Wait until no job is unfinished (a flood's tail), showing how many are left."""
    query = (
        "SELECT count(*) AS bench_own FROM jobs "
        "WHERE state IN ('queued', 'leased', 'running', 'retrying', 'stalled')"
    )
    deadline = time.monotonic() + within
    async with await psycopg.AsyncConnection.connect(stack.database_url, autocommit=True) as c:
        with progress() as bar:
            task = bar.add_task(f"{label}: draining", total=None, rate="")
            while time.monotonic() < deadline:
                row = await (await c.execute(query)).fetchone()
                left = int(row[0]) if row else 0
                bar.update(task, rate=f"{left} unfinished")
                if left == 0:
                    return True
                await asyncio.sleep(0.5)
    return False


async def _submit_paced(
    http: httpx.AsyncClient, key: str, n: int, pace_s: float, priority: str | None
) -> list[str]:
    body: dict[str, Any] = {"kind": "demo.noop", "payload": {}}
    if priority:
        body["priority"] = priority
    ids: list[str] = []
    t0 = time.monotonic()
    for i in range(n):
        await asyncio.sleep(max(0.0, t0 + i * pace_s - time.monotonic()))
        resp = await http.post("/v1/jobs", json=body, headers={"Authorization": f"Bearer {key}"})
        resp.raise_for_status()
        ids.append(resp.json()["id"])
    return ids


async def _warm_up(stack: BenchStack, http: httpx.AsyncClient, key: str) -> None:
    """A few jobs through freshly started workers, unmeasured: their first claims import
    and connect, which is not what the phase measures."""
    await _start_latencies(stack, await _submit_paced(http, key, 8, 0.05, None), 60)


async def _flood(http: httpx.AsyncClient, key: str, n: int, clients: int) -> float:
    """``n`` normal demo.noop jobs in batches of BATCH, ``clients`` requests at once; the
    seconds it took."""
    body = {"kind": "demo.noop", "payload": {}}
    headers = {"Authorization": f"Bearer {key}"}
    sizes = [min(BATCH, n - i) for i in range(0, n, BATCH)]
    gate = asyncio.Semaphore(clients)
    t0 = time.monotonic()
    with progress() as bar:
        task = bar.add_task("flood: submit", total=n, rate="")

        async def one(size: int) -> None:
            async with gate:
                resp = await http.post(
                    "/v1/jobs/batch", json={"jobs": [body] * size}, headers=headers, timeout=180
                )
                resp.raise_for_status()
                bar.advance(task, size)

        await asyncio.gather(*(one(s) for s in sizes))
    return time.monotonic() - t0


def _figures(
    idle: list[float], busy: list[float], n: int, *, within_ms: float | None = None
) -> dict[str, Any]:
    """p50/p95 idle and busy; the target: busy p95 within TARGET_RATIO of idle, or, with
    ``within_ms``, under that many milliseconds."""
    idle_p95, busy_p95 = _pct(idle, 0.95), _pct(busy, 0.95)
    ratio = round(busy_p95 / idle_p95, 2) if idle_p95 and busy_p95 else None
    if within_ms is None:
        met = ratio is not None and ratio <= TARGET_RATIO
        target = f"busy p95 within {TARGET_RATIO:g}x of idle"
    else:
        met = busy_p95 is not None and busy_p95 <= within_ms
        target = f"busy p95 under {within_ms:g} ms"
    return {
        "jobs": n,
        "started": {"idle": len(idle), "busy": len(busy)},
        "idle_ms": {"p50": _pct(idle, 0.5), "p95": idle_p95},
        "busy_ms": {"p50": _pct(busy, 0.5), "p95": busy_p95},
        "p95_ratio": ratio,
        "target": target,
        "target_met": met and len(busy) == n,
    }


async def noisy_neighbour(
    stack: BenchStack,
    *,
    workers: int,
    noisy: int = 5000,
    quiet: int = 50,
    backlog: int = 2000,
    high: int = 20,
    clients: int = 8,
) -> dict[str, Any]:
    """Both halves: tenants (the cap at half the slots), then priority (the default cap)."""
    result = await tenants(stack, workers=workers, noisy=noisy, quiet=quiet, clients=clients)
    result["priority"] = await priority(
        stack, workers=workers, backlog=backlog, high=high, clients=clients
    )
    return result


async def tenants(
    stack: BenchStack,
    *,
    workers: int,
    noisy: int,
    quiet: int,
    clients: int,
    pace_s: float = 0.1,
    drain_timeout: float = 900.0,
) -> dict[str, Any]:
    """B's jobs on an idle system, then behind A's flood."""
    slots = workers * stack.worker_concurrency
    cap = max(1, slots // 2)
    key_a = await asyncio.to_thread(stack.create_key, "noisy-a", "bench: the flood")
    key_b = await asyncio.to_thread(stack.create_key, "quiet-b", "bench: the quiet tenant")
    # Each tenant's own cap (tasklease limits set --max-running): the API's window on the
    # queue and the workers' claims read the same row.
    async with store.connect(stack.database_url) as db:
        for tenant in ("noisy-a", "quiet-b"):
            await store.tenants.set_limits(db, tenant, max_running=cap)
    await asyncio.to_thread(stack.set_workers, workers)
    async with httpx.AsyncClient(base_url=stack.api_url, timeout=30) as http:
        await _warm_up(stack, http, key_b)
        err.print(f"noisy neighbour: B's {quiet} jobs on an idle system")
        idle = await _start_latencies(
            stack, await _submit_paced(http, key_b, quiet, pace_s, None), 60
        )
        err.print(f"noisy neighbour: A floods {noisy} jobs, then B submits {quiet}")
        flood_s = await _flood(http, key_a, noisy, clients)
        busy_ids = await _submit_paced(http, key_b, quiet, pace_s, None)
        busy = await _start_latencies(stack, busy_ids, drain_timeout)
        drained = await _drained(stack, drain_timeout, "flood")
    return {
        "slots": slots,
        "running_cap": cap,
        "tenants": _figures(idle, busy, quiet)
        | {"noisy_jobs": noisy, "flood_submit_s": round(flood_s, 1), "drained": drained},
    }


async def priority(
    stack: BenchStack,
    *,
    workers: int,
    backlog: int,
    high: int,
    clients: int,
    pace_s: float = 0.1,
    drain_timeout: float = 900.0,
) -> dict[str, Any]:
    """High-priority jobs on an idle system, then behind a normal backlog (default cap)."""
    key_c = await asyncio.to_thread(stack.create_key, "backlog-c", "bench: the backlog")
    await asyncio.to_thread(stack.set_workers, workers)
    async with httpx.AsyncClient(base_url=stack.api_url, timeout=30) as http:
        await _warm_up(stack, http, key_c)
        err.print(f"priority: {high} high-priority jobs on an idle system")
        idle = await _start_latencies(
            stack, await _submit_paced(http, key_c, high, pace_s, "high"), 60
        )
        err.print(f"priority: {backlog} normal jobs at once, then {high} high-priority ones")
        await _flood(http, key_c, backlog, clients)
        busy_ids = await _submit_paced(http, key_c, high, pace_s, "high")
        busy = await _start_latencies(stack, busy_ids, drain_timeout)
        drained = await _drained(stack, drain_timeout, "priority backlog")
    # The bar: a high job behind the backlog starts within a second.
    return _figures(idle, busy, high, within_ms=1000) | {
        "backlog_jobs": backlog,
        "drained": drained,
    }
