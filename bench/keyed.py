"""``make bench-keyed`` (``python -m bench.keyed``): flow control by key at volume (issue
35). The same jobs twice on one stack: ``--jobs`` demo.turn jobs (a no-op) over ``--keys``
keys, one running per key (the kind's concurrency 1), and the same jobs with no key (the
same kind, the key left out of the payload: nothing else differs). Reports both
throughputs (jobs / (first submission -> last finished_at)), their ratio (target >=
0.8), the wait for a free slot (from the end of a key's hold to the next claim of the
key by a job that was waiting for it: key_spans.hand_off_waits, from the events) and
checks that no key ever had two jobs holding it at once: the phase fails (exit 1) if
one did. Results in bench/results/keyed.{json,md} (``--out``).

The jobs are submitted in a shuffled order (seeded), ``--batch`` to a POST /v1/jobs/batch
from ``--clients`` clients, with the workers running; the database is emptied of jobs
between the runs, so both start from the same table sizes, and a tenth of them run first,
unmeasured, to warm the stack up. The stack is the
benchmark's (bench/stack.py), on the Redis carrier (its embedded server) by default:
``--transport sqs`` runs it on moto (slow past a few thousand jobs: moto is O(N^2) in
queue depth).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import sys
import time
import uuid
from collections import defaultdict
from pathlib import Path
from typing import Any

import httpx
import psycopg
from rich.console import Console

from app.tools.chaos.key_spans import hand_off_waits, lives, most_holding
from bench.keyed_report import KIND, combine, render, verdict
from bench.measure import PgStats, progress
from bench.stack import BenchStack, Unavailable, quiet_and_interruptible

err = Console(stderr=True)
out = Console(width=120)
EXIT_OK, EXIT_FAILED, EXIT_UNAVAILABLE = 0, 1, 3


def parse(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="make bench-keyed ARGS=...", description=__doc__.split("\n\n")[0]
    )
    p.add_argument("--jobs", type=int, default=10_000, help="jobs per run (default 10,000)")
    p.add_argument("--keys", type=int, default=1_000, help="keys they spread over (default 1,000)")
    p.add_argument("--workers", type=int, default=2, help="worker processes (default 2)")
    p.add_argument("--worker-concurrency", type=int, default=2, help="batches in flight per worker")
    p.add_argument("--clients", type=int, default=4, help="concurrent HTTP clients (default 4)")
    p.add_argument("--batch", type=int, default=100, help="jobs per POST /v1/jobs/batch (<= 100)")
    p.add_argument("--transport", choices=("sqs", "redis"), default="redis")
    p.add_argument("--sqs", choices=("moto", "localstack"), default="moto")
    p.add_argument("--seed", type=int, default=35)
    p.add_argument(
        "--rounds", type=int, default=3, help="each run this many times, in turn (default 3)"
    )
    p.add_argument("--timeout", type=float, default=1800, help="seconds each run may take")
    p.add_argument("--out", type=Path, default=Path("bench/results/keyed.json"))
    p.add_argument("--data-dir", type=Path, default=Path(".tasklease/bench-keyed"))
    args = p.parse_args(argv)
    if args.jobs < 1 or args.keys < 1 or args.keys > args.jobs:
        p.error(
            f"--jobs and --keys must be at least 1, --keys at most --jobs: {args.jobs}, {args.keys}"
        )
    if args.rounds < 1:
        p.error(f"--rounds must be at least 1, not {args.rounds}")
    if not 1 <= args.batch <= 100:
        p.error(f"--batch must be 1 to 100 (the API's most per request), not {args.batch}")
    return args


def payloads(jobs: int, keys: int, seed: int, keyed: bool) -> list[dict[str, Any]]:
    """The jobs' payloads: job i of key i mod ``keys``, shuffled (the same order both
    runs); without ``keyed``, the same payloads less their key."""
    order = list(range(jobs))
    random.Random(seed).shuffle(order)  # noqa: S311 - a reproducible order, not a secret
    return [{"key": f"k-{i % keys}", "n": i} if keyed else {"n": i} for i in order]


async def one_run(
    stack: BenchStack, args: argparse.Namespace, label: str, keyed: bool
) -> dict[str, Any]:
    """Submit the jobs, wait until every one succeeded; the run's figures and, keyed, the
    jobs' events (the keys' spans)."""
    bodies = [
        {"kind": KIND, "payload": p} for p in payloads(args.jobs, args.keys, args.seed, keyed)
    ]
    batches = [bodies[i : i + args.batch] for i in range(0, len(bodies), args.batch)]
    todo: asyncio.Queue[list[dict[str, Any]]] = asyncio.Queue()
    for b in batches:
        todo.put_nowait(b)
    ids: list[str] = []
    pg = PgStats(stack)
    base_commits = pg.reset()
    t0 = time.time()
    with progress() as bar:
        sub = bar.add_task(f"{label}: submit", total=len(bodies), rate="")
        done = bar.add_task(f"{label}: done", total=len(bodies), rate="")
        async with httpx.AsyncClient(
            base_url=stack.api_url, timeout=60, headers=stack.api_headers
        ) as http:

            async def client() -> None:
                while not todo.empty():
                    batch = todo.get_nowait()
                    for _ in range(5):
                        try:
                            resp = await http.post("/v1/jobs/batch", json={"jobs": batch})
                        except httpx.HTTPError:
                            await asyncio.sleep(0.5)
                            continue
                        if resp.status_code == 202:
                            ids.extend(j["id"] for j in resp.json()["jobs"])
                            bar.advance(sub, len(batch))
                            break
                        raise RuntimeError(f"{label}: {resp.status_code} {resp.text[:500]}")
                    else:
                        raise RuntimeError(f"{label}: a batch was not accepted in 5 tries")

            submitting = asyncio.gather(*(client() for _ in range(args.clients)))
            async with await psycopg.AsyncConnection.connect(
                stack.database_url, autocommit=True
            ) as conn:
                n = 0
                while not (submitting.done() and n >= len(ids)):
                    await asyncio.sleep(0.5)
                    row = await (
                        await conn.execute(
                            "SELECT count(*) FROM jobs WHERE kind = %s AND state = 'succeeded'",
                            (KIND,),
                        )
                    ).fetchone()
                    n = int(row[0]) if row else 0
                    bar.update(done, completed=n, rate=f"{n / (time.time() - t0):7.1f} jobs/s")
                    if time.time() - t0 > args.timeout:
                        raise TimeoutError(
                            f"{label}: {n} of {len(bodies)} done in {args.timeout} s"
                        )
                    if any(p.poll() is not None for p in stack.workers):
                        raise RuntimeError(f"{label}: a worker exited (logs in {stack.logs})")
                await submitting
                result = await figures(conn, label, ids, t0, keyed)
    # The database's work per job (the API's and the workers'; pg_stat_statements counts
    # at once, the commits lag: read without waiting, they are a floor).
    stats = pg.read(base_commits, 0)
    result["pg_statements_per_job"] = round(sum(c for _, c in stats["statements"]) / len(ids), 2)
    if stack.pg_stat_statements:
        with psycopg.connect(stack.database_url, autocommit=True) as c:
            spent = c.execute(
                "SELECT left(s.query, 80), s.calls, s.total_exec_time AS bench_own "
                "FROM pg_stat_statements s JOIN pg_database d ON d.oid = s.dbid "
                "AND d.datname = current_database() WHERE s.query NOT LIKE %s "
                "ORDER BY s.total_exec_time DESC",
                ("%bench_own%",),
            ).fetchall()
        result["pg_exec_ms_per_job"] = round(sum(float(r[2]) for r in spent) / len(ids), 3)
        # The statements that took the database's time, longest first: [text, calls, ms].
        result["pg_top_statements"] = [[str(q), int(n), round(float(ms))] for q, n, ms in spent[:6]]
    return result


async def figures(
    conn: psycopg.AsyncConnection[Any], label: str, ids: list[str], t0: float, keyed: bool
) -> dict[str, Any]:
    uuids = [uuid.UUID(i) for i in ids]
    row = await (
        await conn.execute(
            "SELECT extract(epoch FROM max(finished_at)), count(*) FILTER (WHERE flow_key IS NOT NULL) "
            "FROM jobs WHERE id = ANY(%s)",
            (uuids,),
        )
    ).fetchone()
    assert row is not None
    seconds = float(row[0]) - t0
    # Each job's wait from its acceptance to its first claim: the backlog a job meets,
    # keyed or not (a keyed job's wait for a free slot is a part of it).
    claims = await (
        await conn.execute(
            "SELECT extract(epoch FROM min(e.at) FILTER (WHERE e.to_state = 'leased') "
            "- min(e.at)) FROM job_events e WHERE e.job_id = ANY(%s) GROUP BY e.job_id",
            (uuids,),
        )
    ).fetchall()
    result: dict[str, Any] = {
        "label": label,
        "jobs": len(ids),
        "jobs_with_a_key": int(row[1]),
        "seconds": round(seconds, 2),
        "jobs_per_s": round(len(ids) / seconds, 1),
        "wait_for_a_claim_ms": None,  # over the rounds: combine()
        "_claims": [float(r[0]) for r in claims if r[0] is not None],
    }
    if not keyed:
        return result
    rows = await (
        await conn.execute(
            "SELECT j.flow_key, e.job_id::text, e.at, e.from_state::text, e.to_state::text, e.detail "
            "FROM job_events e JOIN jobs j ON j.id = e.job_id WHERE e.job_id = ANY(%s) "
            "ORDER BY e.job_id, e.id",
            (uuids,),
        )
    ).fetchall()
    key_of: dict[str, str] = {}
    events_of: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for key, job_id, at, a, b, detail in rows:
        key_of[job_id] = key
        events_of[job_id].append(
            {"job_id": job_id, "at": at, "from_state": a, "to_state": b, "detail": detail}
        )
    by_key: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for job_id, key in key_of.items():
        by_key[key].append({"id": job_id})
    waits: list[float] = []
    twice: list[dict[str, Any]] = []
    behind = 0
    for key, jobs in by_key.items():
        key_lives = list(lives(jobs, events_of).values())
        most, at = most_holding(s for one in key_lives for s in one.holds)
        if most > 1:
            twice.append({"key": key, "holding": most, "at": str(at)})
        found = hand_off_waits(key_lives)
        behind += len(found)
        waits += found
    result |= {
        "keys": len(by_key),
        "keys_held_by_two_at_once": twice[:20],
        "keys_held_by_two_count": len(twice),
        "waited_behind_their_key": behind,
        "wait_for_a_free_slot_ms": None,  # over the rounds: combine()
        "_waits": waits,
    }
    return result


async def empty_jobs(stack: BenchStack) -> None:
    """The first run's jobs (their events, effects, outbox rows) gone, the tables analysed:
    the second run starts from the sizes the first did."""
    async with await psycopg.AsyncConnection.connect(stack.database_url, autocommit=True) as c:
        await c.execute("TRUNCATE jobs CASCADE")
        await c.execute("VACUUM ANALYZE")


def main(argv: list[str] | None = None) -> int:
    args = parse(sys.argv[1:] if argv is None else argv)
    quiet_and_interruptible()
    stack = BenchStack(args.sqs, args.data_dir, args.worker_concurrency, args.transport)
    try:
        stack.prepare_dir()
        with err.status("starting PostgreSQL, the carrier, the API…"):
            stack.start_postgres_with_stats()
            if args.transport == "redis":
                stack.start_redis_carrier(None)
            else:
                stack.start_sqs_with_proxy()
            stack.start_bench_api()
        stack.set_workers(args.workers)
        # A tenth of the jobs first, unmeasured: the first claims, pools and caches warm
        # up there, not in whichever run came first.
        warm = argparse.Namespace(**{**vars(args), "jobs": max(args.keys, args.jobs // 10)})
        asyncio.run(one_run(stack, warm, "warm-up", keyed=False))
        asyncio.run(empty_jobs(stack))
        runs: dict[bool, list[dict[str, Any]]] = {False: [], True: []}
        for r in range(args.rounds):
            # Each round runs both, in turn first: a drift in the machine's load over
            # the run weighs on both sides alike.
            for keyed_first in (False, True) if r % 2 == 0 else (True, False):
                label = f"round {r + 1}: " + ("one per key" if keyed_first else "no keys")
                runs[keyed_first].append(asyncio.run(one_run(stack, args, label, keyed_first)))
                asyncio.run(empty_jobs(stack))
    except Unavailable as exc:
        err.print(f"[red]unavailable:[/] {exc}")
        return EXIT_UNAVAILABLE
    except KeyboardInterrupt:
        err.print("interrupted: stopping everything")
        return 130
    finally:
        stack.stop()
    ratios = [
        k["jobs_per_s"] / u["jobs_per_s"] for u, k in zip(runs[False], runs[True], strict=True)
    ]
    unkeyed, keyed = combine(runs[False]), combine(runs[True])
    doc = {
        "transport": args.transport if args.transport == "redis" else args.sqs,
        "workers": args.workers,
        "worker_concurrency": args.worker_concurrency,
        "rounds": args.rounds,
        "jobs_per_run": args.jobs,
        "load_average_at_end": [round(x, 2) for x in os.getloadavg()],
        "unkeyed": unkeyed,
        "keyed": keyed,
        "verdict": {**verdict(unkeyed, keyed, ratios), "rounds": [round(x, 3) for x in ratios]},
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(doc, indent=2, default=str) + "\n")
    table = render(doc)
    out.print(table)
    with args.out.with_suffix(".md").open("w") as fh:
        Console(file=fh, width=120, color_system=None).print(table)
    out.print(f"results: {args.out}", highlight=False)
    return EXIT_FAILED if doc["verdict"]["problems"] else EXIT_OK


if __name__ == "__main__":
    raise SystemExit(main())
