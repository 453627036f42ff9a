"""The single-submission floor (issue 18): tasklease's ``POST /v1/jobs`` against a bare
FastAPI route that does one INSERT per request (bench/floor_app.py), on the same server
stack, the same PostgreSQL, driven by the same clients.

The comparison is the API alone: no worker runs while either is measured (workers would
take CPU from the API on a small machine, and the floor has none). Rounds alternate,
floor then tasklease, so a neighbour's load on a shared machine falls on both; each
side's best round is its figure. tasklease's jobs of each round are drained by the
workers before the next (moto's calls cost more as its queue fills), so each round starts
on an empty queue and nothing is left queued for the phases that follow. Each server's
CPU per request is read from /proc: on a shared machine it varies far less than req/s.
"""

from __future__ import annotations

import asyncio
import importlib.util
import statistics
import sys
import time
from typing import Any

import httpx
import psycopg

from app.settings import config
from app.tools.stack import embedded
from app.tools.stack.stack import Process
from bench import floor_app
from bench.cpu_meter import TICK, stat_fields
from bench.measure import progress, run_pool
from bench.stack import BenchStack

BODY = {"kind": "demo.noop", "payload": {}}  # the body tasklease's e2e phase sends


def server_stack() -> str:
    """What uvicorn's "auto" picks for both processes (same interpreter, same call)."""
    loop = "uvloop" if importlib.util.find_spec("uvloop") else "asyncio"
    http = "httptools" if importlib.util.find_spec("httptools") else "h11"
    return f"uvicorn, 1 process, loop {loop}, http {http}, access log off"


def cpu_seconds(*pids: int | None) -> float | None:
    """These processes' CPU time so far (user + system), from /proc; None elsewhere."""
    total = 0.0
    for pid in pids:
        fields = stat_fields(pid) if pid else None
        if fields is None:
            return None
        total += (int(fields[11]) + int(fields[12])) / TICK
    return total


def broker_pids(stack: BenchStack) -> list[int]:
    """The local SQS server and the counting proxy (none on Redis or LocalStack)."""
    procs = [stack.proxy, stack.moto.proc if stack.moto else None]
    return [p.pid for p in procs if p is not None] if not stack.on_redis else []


def _per_req(before: float | None, after: float | None, n: int) -> float | None:
    if before is None or after is None:
        return None
    return round((after - before) * 1000 / max(1, n), 3)


def pg_exec_ms(stack: BenchStack | None, reset: bool = False) -> float | None:
    """The statements' execution time in PostgreSQL since the last reset, in ms (the
    benchmark's own left out); None without pg_stat_statements."""
    if stack is None or not stack.pg_stat_statements:
        return None
    with psycopg.connect(stack.database_url, autocommit=True) as conn:
        if reset:
            conn.execute("SELECT pg_stat_statements_reset() AS bench_own")
            return 0.0
        row = conn.execute(
            "SELECT coalesce(sum(s.total_exec_time), 0) AS bench_own FROM pg_stat_statements s "
            "JOIN pg_database d ON d.oid = s.dbid AND d.datname = current_database() "
            "WHERE s.query NOT LIKE %s",
            ("%bench_own%",),
        ).fetchone()
    return float(row[0]) if row else None


async def drive(
    url: str,
    headers: dict[str, str],
    n: int,
    clients: int,
    label: str,
    pid: int | None = None,
    stack: BenchStack | None = None,
) -> dict[str, Any]:
    """N ``POST /v1/jobs`` of BODY from ``clients`` concurrent httpx clients, set up as
    tasklease's e2e phase sets them up (bench/e2e.py: tasklease_e2e); with ``pid``,
    the CPU that server process spent per request (less noisy than req/s on a shared
    machine); with ``stack``, PostgreSQL's execution time per request (no worker runs)."""
    pg_exec_ms(stack, reset=True)
    broker = broker_pids(stack) if stack is not None and pid is not None else []
    cpu0, broker0 = cpu_seconds(pid), cpu_seconds(*broker) if broker else None
    took: list[float] = []
    errors = 0
    limits = httpx.Limits(max_connections=clients, max_keepalive_connections=clients)
    with progress() as bar:
        task = bar.add_task(label, total=n, rate="")
        async with httpx.AsyncClient(
            base_url=url, timeout=30, limits=limits, headers=headers
        ) as http:

            async def submit(_: int) -> None:
                nonlocal errors
                s = time.perf_counter()
                resp = await http.post("/v1/jobs", json=BODY)
                if resp.status_code != 202:
                    errors += 1
                    return
                resp.json()["id"]  # read the answer, as the e2e phase does
                took.append((time.perf_counter() - s) * 1000)
                bar.advance(task)

            t0 = time.perf_counter()
            await run_pool(n, clients, submit)
            elapsed = time.perf_counter() - t0
        bar.update(task, rate=f"{len(took) / elapsed:7.1f} req/s")
    cpu1, broker1 = cpu_seconds(pid), cpu_seconds(*broker) if broker else None
    pg_ms = pg_exec_ms(stack)
    took.sort()
    return {
        "pg_exec_ms_per_req": _per_req(0.0, pg_ms and pg_ms / 1000, len(took)),
        "server_cpu_ms_per_req": _per_req(cpu0, cpu1, len(took)),
        "sqs_server_and_proxy_cpu_ms_per_req": _per_req(broker0, broker1, len(took)),
        "requests": n,
        "accepted": len(took),
        "errors": errors,
        "elapsed_s": round(elapsed, 3),
        "req_per_s": round(len(took) / elapsed, 1),
        "ms_p50": round(took[len(took) // 2], 2) if took else None,
        "ms_p95": round(took[int(len(took) * 0.95)], 2) if took else None,
    }


def start_floor(stack: BenchStack) -> tuple[Process, str]:
    """The floor's process, with the API's pool sizes (from the environment the API was
    started with, else the settings' defaults), on a free port."""
    fields = config.Settings.model_fields
    args = [
        stack.env.get(f"{config.PREFIX}{name.upper()}", str(fields[name].default))
        for name in ("pool_min_size", "pool_max_size")
    ]
    port = embedded.free_port()
    proc = Process(
        "floor",
        [sys.executable, "-m", "bench.floor_app", stack.database_url, str(port), *args],
        log_path=stack.logs / "floor.log",
        env=stack.env,
    )
    stack.procs.append(proc)
    url = f"http://127.0.0.1:{port}"
    embedded.wait_for_http(f"{url}/healthz", timeout=30, proc=proc)
    return proc, url


async def _drain(stack: BenchStack, workers: int, since: float) -> None:
    """Run the workers until every job submitted since ``since`` is finished."""
    stack.set_workers(workers, settle=0)
    conn = await psycopg.AsyncConnection.connect(stack.database_url, autocommit=True)
    async with conn:
        deadline = time.monotonic() + 600
        while time.monotonic() < deadline:
            cur = await conn.execute(
                "SELECT count(*) AS bench_own FROM jobs WHERE finished_at IS NULL "
                "AND created_at >= to_timestamp(%s)",
                (since,),
            )
            row = await cur.fetchone()
            if row is not None and int(row[0]) == 0:
                break
            await asyncio.sleep(0.25)
    stack.stop_workers()


async def _count_floor_rows(stack: BenchStack) -> int:
    conn = await psycopg.AsyncConnection.connect(stack.database_url, autocommit=True)
    async with conn:
        cur = await conn.execute(f"SELECT count(*) AS bench_own FROM {floor_app.TABLE}")  # noqa: S608
        row = await cur.fetchone()
    return int(row[0]) if row else 0


async def run(
    stack: BenchStack,
    jobs: int,
    clients: int,
    workers: int,
    *,
    rounds: int = 3,
    e2e_submit_req_per_s: float | None = None,
) -> dict[str, Any]:
    """The floor and tasklease's API alone, ``rounds`` each, alternating; no workers run."""
    stack.stop_workers()
    # A stopped worker's long poll lives on in the broker until its wait ends (bench/phases.py).
    await asyncio.sleep(float(stack.env.get("TASKLEASE_WAIT_TIME_SECONDS", "1")) + 1)
    proc, url = start_floor(stack)
    api_pid = next((p.pid for p in stack.procs if getattr(p, "name", "") == "api"), None)
    floor_runs: list[dict[str, Any]] = []
    api_runs: list[dict[str, Any]] = []
    try:
        for i in range(rounds):
            label = f"floor {i + 1}/{rounds}"
            floor_runs.append(
                await drive(url, {}, jobs, clients, f"{label}: 1 INSERT", proc.pid, stack)
            )
            since = time.time() - 0.2
            api_runs.append(
                await drive(
                    stack.api_url,
                    stack.api_headers,
                    jobs,
                    clients,
                    f"{label}: tasklease",
                    api_pid,
                    stack,
                )
            )
            # Each round starts on an empty queue: moto's calls cost more as it fills.
            await _drain(stack, workers, since)
        stored = await _count_floor_rows(stack)
    finally:
        embedded.terminate([proc], grace=3)
        stack.procs.remove(proc)
    best_floor = max(r["req_per_s"] for r in floor_runs)
    best_api = max(r["req_per_s"] for r in api_runs)
    return {
        "server": server_stack(),
        "floor_route": "FastAPI, one INSERT (uuid, text, jsonb) per request, psycopg "
        "AsyncConnectionPool (autocommit, prepared); no queue, no auth",
        "jobs_per_round": jobs,
        "clients": clients,
        "rounds": rounds,
        "floor_rows_stored": stored,
        "floor": floor_runs,
        "tasklease_api_alone": api_runs,
        "floor_req_per_s": best_floor,
        "tasklease_req_per_s": best_api,
        # Each tasklease round against the floor round just before it (the same minute's
        # neighbours), the median of those: a quiet minute lifts one side's best alone.
        "ratio": _median(
            [a["req_per_s"] / f["req_per_s"] for f, a in zip(floor_runs, api_runs, strict=True)]
        ),
        "ratio_of_best": round(best_api / best_floor, 3) if best_floor else None,
        "floor_cpu_ms_per_req": _least(floor_runs),
        "tasklease_cpu_ms_per_req": _least(api_runs),
        "floor_pg_exec_ms_per_req": _least(floor_runs, "pg_exec_ms_per_req"),
        "tasklease_pg_exec_ms_per_req": _least(api_runs, "pg_exec_ms_per_req"),
        "tasklease_sqs_cpu_ms_per_req": _least(api_runs, "sqs_server_and_proxy_cpu_ms_per_req"),
        "ratio_cpu": _ratio(_least(floor_runs), _least(api_runs)),
        "ratio_e2e_submit": (
            round(e2e_submit_req_per_s / best_floor, 3)
            if best_floor and e2e_submit_req_per_s
            else None
        ),
        "target": 0.7,
    }


def _median(xs: list[float]) -> float | None:
    return round(statistics.median(xs), 3) if xs else None


def _ratio(a: float | None, b: float | None) -> float | None:
    return round(a / b, 3) if a and b else None


def _fmt(v: float | None) -> str:
    return "—" if v is None else str(v)


def _least(runs: list[dict[str, Any]], key: str = "server_cpu_ms_per_req") -> float | None:
    found = [r[key] for r in runs if r[key] is not None]
    return min(found) if found else None


def rows(f: dict[str, Any] | None) -> list[tuple[str, str]]:
    """The phase's lines in the report's table."""
    if not f:
        return []

    def runs(rs: list[dict[str, Any]]) -> str:
        return ", ".join(
            f"{r['req_per_s']} ({r['ms_p50']} ms p50, {r['server_cpu_ms_per_req']} ms CPU/req)"
            for r in rs
        )

    met = "met" if f["ratio"] is not None and f["ratio"] >= f["target"] else "MISSED"
    return [
        (
            f"single-submission floor: 1 INSERT/request, {f['clients']} clients, "
            f"best of {f['rounds']} rounds x {f['jobs_per_round']}, req/s ({f['server']})",
            f"{f['floor_req_per_s']}  (rounds: {runs(f['floor'])})",
        ),
        (
            "  tasklease POST /v1/jobs, API alone, same clients, req/s",
            f"{f['tasklease_req_per_s']}  (rounds: {runs(f['tasklease_api_alone'])})",
        ),
        (
            "  per request, floor / tasklease (least of the rounds): server CPU ms; "
            "PostgreSQL execution ms",
            f"{f['floor_cpu_ms_per_req']} / {f['tasklease_cpu_ms_per_req']}; "
            f"{_fmt(f['floor_pg_exec_ms_per_req'])} / {_fmt(f['tasklease_pg_exec_ms_per_req'])}",
        ),
        (
            "  tasklease's SQS send: the local SQS server and the proxy, CPU ms/request",
            _fmt(f["tasklease_sqs_cpu_ms_per_req"]),
        ),
        (
            "  ratio to the floor: req/s, median of the paired rounds (target); of the "
            "best rounds; server CPU/request (floor's / tasklease's); e2e submit rate "
            "(workers running) / floor",
            f"{f['ratio']} (target ≥ {f['target']}: {met}); {_fmt(f['ratio_of_best'])}; "
            f"{_fmt(f['ratio_cpu'])}; {_fmt(f['ratio_e2e_submit'])}",
        ),
    ]
