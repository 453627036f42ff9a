"""What every phase of the benchmark uses: its progress bars, a pool of concurrent
callers, and PostgreSQL's counts of the statements and commits a phase made."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

import psycopg
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

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


async def run_pool(n: int, concurrency: int, fn: Callable[[int], Any]) -> None:
    """fn(0) .. fn(n - 1), at most ``concurrency`` at a time."""
    counter = iter(range(n))

    async def loop() -> None:
        for i in counter:
            await fn(i)

    await asyncio.gather(*(loop() for _ in range(concurrency)))


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
            by_statement: dict[str, float] = {}
            exec_ms: float | None = None
            if self.statements:
                found = conn.execute(
                    "SELECT s.query, s.calls, s.total_exec_time AS bench_own "
                    "FROM pg_stat_statements s "
                    "JOIN pg_database d ON d.oid = s.dbid AND d.datname = current_database() "
                    "WHERE s.query NOT LIKE %s ORDER BY s.calls DESC",
                    ("%bench_own%",),
                ).fetchall()
                # One text can be several entries (psycopg sends an int as int2, int4 or
                # int8 by its value, and each parameter type has its own queryid): summed.
                calls: dict[str, int] = {}
                for q, c, t in found:
                    calls[str(q)] = calls.get(str(q), 0) + int(c)
                    by_statement[str(q)] = by_statement.get(str(q), 0.0) + float(t)
                statements = sorted(calls.items(), key=lambda s: -s[1])
                exec_ms = sum(by_statement.values())
        commits = (int(row[0]) if row else 0) - base_commits - self.own - 2  # our 2 snapshots
        return {
            "commits": max(0, commits),
            "statements": statements,
            "exec_ms": exec_ms,
            "exec_ms_by_statement": by_statement,
        }
