"""``make bench-scale`` (``python -m bench.scale``): the same measures on an almost empty
database and on one holding a year of history (1,000,000 jobs of 20 tenants with their
events, effects and outbox rows, bench/scale_fill.sql), side by side, each as a
large/small ratio (target <= 1.3), and the hot queries' EXPLAIN (ANALYZE, BUFFERS) on
the large one. Results in bench/results/scale.{json,md}.

The stack is the benchmark's (bench/stack.py): embedded PostgreSQL with
pg_stat_statements, moto's SQS server behind the counting proxy, the API, 2 workers.
The API and workers are stopped while the history is written and started again after,
so both sizes are measured from a fresh start with the same keys and clients.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import psycopg
from rich.console import Console
from rich.table import Table

from app.cli import runner
from app.services import auth, retention, sweeper
from bench import scale_fill, scale_measures
from bench import scale_plans as plans
from bench.measure import progress
from bench.stack import BenchStack, Unavailable, quiet_and_interruptible

err = Console(stderr=True)
out = Console(width=150)
TENANT = "bench"  # the big tenant: half of the history, and the one that submits
TARGET = 1.3
# The almost empty database: 10,000 jobs over the year, dead letters and cancelled jobs
# enough for full pages and full prune batches of every state, and the unfinished jobs
# (500 waiting) both sizes share: the large fill adds finished history only.
SMALL_HISTORY = {"jobs": 10_000, "dead_every": 10, "cancel_every": 12, "waiting": 500}


def parse(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="make bench-scale ARGS=...", description=__doc__.split("\n\n")[0]
    )
    p.add_argument(
        "--jobs", type=int, default=1_000_000, help="historical jobs (default 1,000,000)"
    )
    p.add_argument(
        "--submits",
        type=int,
        default=300,
        help="demo.noop jobs submitted (POST /v1/jobs, timed) and run to the end (default 300)",
    )
    p.add_argument("--clients", type=int, default=8)
    p.add_argument("--out", type=Path, default=Path("bench/results/scale.json"))
    p.add_argument("--data-dir", type=Path, default=Path(".tasklease/bench-scale"))
    return p.parse_args(argv)


def start_app(stack: BenchStack) -> None:
    """The API (deployment-default admission limits, but a rate the timed clients do not
    reach: the checks run as they would, nothing is refused) and 2 workers."""
    assert stack.urls is not None
    stack.env = {
        **stack.process_env(stack.urls, stack.queue_name, stack.proxy_url),
        "TASKLEASE_WAIT_TIME_SECONDS": "1",
        "TASKLEASE_BATCH_SIZE": "10",
        "TASKLEASE_RATE_LIMIT_PER_SECOND": "1000",
        "TASKLEASE_RATE_LIMIT_BURST": "2000",
        "PYTHONWARNINGS": "ignore::UserWarning",
    }
    stack.start_api()
    stack.set_workers(2)


def stop_app(stack: BenchStack) -> None:
    stack.stop_workers()
    stack.stop_processes()


async def sweep_pass(stack: BenchStack, passes: int = 5) -> dict[str, Any]:
    """A sweeper pass (app.services.sweeper.sweep_once, in this process), its pruning off
    (measured on its own: a pass's prune batches are a prune's): the median of
    ``passes``, and its statements' time in PostgreSQL a pass."""
    s = stack.settings(database_url=stack.database_url, prune_batches_per_sweep=0)
    took = []
    scale_measures.reset_statements(stack.database_url)
    async with runner.clients(s) as c:
        for _ in range(passes):
            t = time.perf_counter()
            await sweeper.sweep_once(s, c.database, c.queue)
            took.append((time.perf_counter() - t) * 1000)
    st = scale_measures.statements(stack.database_url)
    db_ms = sum(v["calls"] * v["mean_ms"] for v in st.values()) / passes
    return {"ms": statistics.median(took), "db_ms": db_ms, "statements": st}


async def prune_batch(stack: BenchStack) -> dict[str, Any]:
    """One prune batch of each retained state (app.services.retention.prune,
    max_batches=1, the default retention and batch size): the time a batch, and the
    prune statement's mean time in PostgreSQL."""
    s = stack.settings(database_url=stack.database_url)
    scale_measures.reset_statements(stack.database_url)
    async with runner.clients(s) as c:
        report = await retention.prune(s, c.database, max_batches=1)
    st = scale_measures.statements(stack.database_url).get("prune_jobs", {})
    return {
        "ms": report.seconds * 1000 / max(1, report.batches),
        "db_ms": st.get("mean_ms"),
        "batches": report.batches,
        "batch_size": s.prune_batch_size,
        "rows": report.rows,
    }


async def measure(
    stack: BenchStack, keys: dict[str, str], args: argparse.Namespace, label: str
) -> dict[str, Any]:
    m = scale_measures.Measures(stack, keys, label)
    result: dict[str, Any] = {}
    result |= await m.submit_and_run(args.submits, args.clients)
    result |= await m.pages()
    result |= await m.search(TENANT)
    result |= await m.counts()
    result |= await m.charts()
    # Before the sweeper and the prune write: the hot queries' work on the same rows.
    result["plans"] = explain_all(stack.database_url)
    result["sweeper pass (pruning off)"] = await sweep_pass(stack)
    result["prune: one batch"] = await prune_batch(stack)
    result["load average (1 min) at the end"] = os.getloadavg()[0]
    return result


def explain_all(url: str) -> list[dict[str, Any]]:
    """EXPLAIN (ANALYZE, BUFFERS) of each hot query: its text, and the pages it touched
    (shared hit + read: the work it did, which the machine's load does not move)."""
    found = []
    with psycopg.connect(url, autocommit=True) as conn:
        s = plans.sample(conn, TENANT)
        for hot in plans.hot_queries(TENANT, s):
            plan, text = plans.explain(conn, hot, analyze=True)
            found.append(
                {
                    "label": hot.label,
                    "query": hot.name,
                    "seq_scans": plans.seq_scans(plan),
                    "buffers": sum(plan.get(k, 0) for k in BUFFER_KEYS),
                    "rows": plan.get("Actual Rows"),
                    "ms": exec_ms(text),
                    "plan": text,
                }
            )
    return found


BUFFER_KEYS = ("Shared Hit Blocks", "Shared Read Blocks")


def exec_ms(text: str) -> float | None:
    for line in text.splitlines():
        if line.startswith("Execution Time:"):
            return float(line.split()[2])
    return None


def work_table(
    small: list[dict[str, Any]], large: list[dict[str, Any]]
) -> tuple[Table, list[dict[str, Any]]]:
    t = Table(
        title="the hot queries' work: pages touched (EXPLAIN ANALYZE BUFFERS), small vs large"
    )
    for col in (
        "query",
        "rows",
        "small",
        "large",
        "large/small",
        "ms small",
        "ms large",
        "seq scans",
    ):
        t.add_column(col, justify="left" if col == "query" else "right")
    rows = []
    for a, b in zip(small, large, strict=True):
        r = round(b["buffers"] / a["buffers"], 2) if a["buffers"] else None
        rows.append(
            {
                "query": a["label"],
                "rows": f"{a['rows']:g}/{b['rows']:g}",
                "small": a["buffers"],
                "large": b["buffers"],
                "ratio": r,
                "ms_small": a["ms"],
                "ms_large": b["ms"],
                "seq_scans_large": b["seq_scans"],
            }
        )
        t.add_row(
            a["label"],
            rows[-1]["rows"],
            str(a["buffers"]),
            str(b["buffers"]),
            ratio_text(r),
            f"{a['ms']:.2f}",
            f"{b['ms']:.2f}",
            ", ".join(b["seq_scans"]) or "-",
        )
    return t, rows


def table(
    small: dict[str, Any], large: dict[str, Any], sizes: dict[str, Any]
) -> tuple[Table, list[dict[str, Any]]]:
    t = Table(title=f"tasklease on a small vs a large database ({sizes['large']})")
    for col in ("measure", "small", "large", "large/small", ""):
        t.add_column(col, justify="left" if col == "measure" else "right")
    rows = []
    for name, a in small.items():
        b = large.get(name, {})
        if not isinstance(a, dict):
            continue
        for unit in ("ms", "db_ms", "p50_ms", "p95_ms", "per_job", "mean_ms"):
            if unit not in a or b.get(unit) is None:
                continue
            r = round(b[unit] / a[unit], 2) if a[unit] else None
            verdict = "" if r is None else ("ok" if r <= TARGET else "OVER")
            rows.append(
                {"measure": f"{name} ({unit})", "small": a[unit], "large": b[unit], "ratio": r}
            )
            t.add_row(
                f"{name} ({unit})",
                f"{a[unit]:.2f}",
                f"{b[unit]:.2f}",
                "-" if r is None else f"{r:.2f}x",
                verdict,
            )
    return t, rows


def ratio_text(r: float | None) -> str:
    return "-" if r is None else f"{r:.2f}x"


def write(result: dict[str, Any], out_json: Path) -> None:
    out_json.parent.mkdir(parents=True, exist_ok=True)
    out_json.write_text(json.dumps(result, indent=2, default=str) + "\n")
    md = [
        "# Scale phase: small vs large database",
        "",
        f'`make bench-scale ARGS="{result["argv"]}"`, {result["started_at"]}; '
        f"small: {result['sizes']['small']}; large: {result['sizes']['large']}; "
        f"fill {result['fill_s']} s (steps: {result['fill_steps']}). Target: each large/small <= {TARGET}.",
        "",
        "| measure | small | large | large/small |",
        "|---|---:|---:|---:|",
        *[
            f"| {r['measure']} | {r['small']:.2f} | {r['large']:.2f} | {ratio_text(r['ratio'])} |"
            for r in result["rows"]
        ],
        "",
        "## The hot queries' work: pages touched, small vs large",
        "",
        "EXPLAIN (ANALYZE, BUFFERS) of each hot query with the app's parameters (writes rolled "
        "back): shared buffers hit + read, and the execution time.",
        "",
        "| query | rows small/large | pages small | pages large | large/small | ms small | ms large |",
        "|---|---:|---:|---:|---:|---:|---:|",
        *[
            f"| {r['query']} | {r['rows']} | {r['small']} | {r['large']} | {ratio_text(r['ratio'])} | "
            f"{r['ms_small']:.2f} | {r['ms_large']:.2f} |"
            for r in result["work"]
        ],
        "",
        "## EXPLAIN (ANALYZE, BUFFERS) of the hot queries on the large database",
        "",
    ]
    for p in result["plans"]:
        seq = ", ".join(p["seq_scans"]) or "none"
        md += [
            f"### {p['label']} (`{p['query']}`; sequential scans of big tables: {seq})",
            "",
            "```",
            p["plan"],
            "```",
            "",
        ]
    out_json.with_suffix(".md").write_text("\n".join(md))


def size(url: str) -> str:
    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute(
            "SELECT (SELECT count(*) FROM jobs), (SELECT count(*) FROM job_events), "
            "pg_size_pretty(pg_database_size(current_database()))"
        ).fetchone()
    assert row is not None
    return f"{row[0]:,} jobs, {row[1]:,} events, {row[2]}"


def main(argv: list[str] | None = None) -> int:
    args = parse(sys.argv[1:] if argv is None else argv)
    quiet_and_interruptible()
    stack = BenchStack("moto", args.data_dir, 2)
    started = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    t0 = time.monotonic()
    try:
        stack.prepare_dir()
        with err.status("starting PostgreSQL (pg_stat_statements), moto, the proxy…"):
            stack.start_postgres_with_stats()
            with psycopg.connect(stack.database_url, autocommit=True) as conn:
                # A production-sized WAL budget: the fill is not a string of checkpoints.
                conn.execute("ALTER SYSTEM SET max_wal_size = '4GB'")
                conn.execute("SELECT pg_reload_conf()")
            stack.start_sqs_with_proxy()
            keys = {
                "tenant": asyncio.run(auth.create_key_at(stack.database_url, TENANT, name="scale")),
                "admin": asyncio.run(
                    auth.create_key_at(stack.database_url, "ops", name="scale", admin=True)
                ),
            }
            # The almost empty database: a little history, so that the deep page and a
            # prune batch have rows to read on both sizes.
            scale_fill.fill(
                stack.database_url,
                SMALL_HISTORY["jobs"],
                TENANT,
                dead_every=SMALL_HISTORY["dead_every"],
                cancel_every=SMALL_HISTORY["cancel_every"],
                waiting=SMALL_HISTORY["waiting"],
            )
            start_app(stack)
        err.print(f"[green]✓[/] stack up in {time.monotonic() - t0:.1f} s; logs in {stack.logs}")
        small = asyncio.run(measure(stack, keys, args, "small"))
        small_size = size(stack.database_url)
        stop_app(stack)
        with progress() as bar:
            task = bar.add_task(
                f"filling {args.jobs:,} jobs", total=len(scale_fill.steps()) + 1, rate=""
            )

            def step_done(name: str, seconds: float) -> None:
                bar.advance(task)
                bar.update(task, rate=f"{name} {seconds:.0f} s")

            t = time.monotonic()
            steps = scale_fill.fill(
                stack.database_url, args.jobs, TENANT, step_done, first=SMALL_HISTORY["jobs"] + 1
            )
            fill_s = round(time.monotonic() - t, 1)
        large_size = size(stack.database_url)
        err.print(f"[green]✓[/] filled in {fill_s} s: {large_size}")
        start_app(stack)
        large = asyncio.run(measure(stack, keys, args, "large"))
    except Unavailable as exc:
        err.print(f"[red]unavailable:[/] {exc}")
        return 3
    except KeyboardInterrupt:
        err.print("interrupted: stopping everything")
        return 130
    finally:
        with err.status("stopping every process the benchmark started…"):
            stack.stop()
    sizes = {"small": small_size, "large": large_size}
    shown, rows = table(small, large, sizes)
    out.print(shown)
    found = large.pop("plans")
    work, work_rows = work_table(small.pop("plans"), found)
    out.print(work)
    result = {
        "started_at": started,
        "argv": " ".join(sys.argv[1:] if argv is None else argv),
        "sizes": sizes,
        "fill_s": fill_s,
        "fill_steps": steps,
        "small": small,
        "large": large,
        "rows": rows,
        "over_target": [r["measure"] for r in rows if r["ratio"] and r["ratio"] > TARGET],
        "work": work_rows,
        "work_over_target": [r["query"] for r in work_rows if r["ratio"] and r["ratio"] > TARGET],
        "plans": found,
        "total_s": round(time.monotonic() - t0, 1),
    }
    write(result, args.out)
    out.print(
        f"results: {args.out} and {args.out.with_suffix('.md')} ({result['total_s']} s in all)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
