"""``tasklease prune [--dry-run]``: delete finished jobs past their retention with their
rows, in batches (docs/explain/design.md#retention), showing each batch as it goes."""

from __future__ import annotations

import dataclasses
from typing import Annotated

import typer
from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

from app import store
from app.cli import render_json, runner
from app.cli.render import PlainTable, err, out, plain, when
from app.services import retention
from app.settings import config


def _keep(seconds: float) -> str:
    days, rest = divmod(int(seconds), 86_400)
    return f"{days} d" if not rest else f"{int(seconds)} s"


def _due_table(s: config.Settings, rows: list[store.retention.Due]) -> PlainTable:
    table = PlainTable(
        "state",
        "kept for",
        "past it",
        "held back",
        "to prune",
        "oldest finish",
        title="dry run: what a prune would delete now (nothing was deleted)",
    )
    keeps = s.retention()
    for r in rows:
        table.add_row(
            r.state,
            _keep(keeps[r.state]),
            str(r.due),
            str(r.held),
            str(r.due - r.held),
            when(r.oldest),
        )
    return table


def _report_table(report: retention.PruneReport) -> PlainTable:
    tables = store.retention.TABLES
    table = PlainTable(
        "state", *tables, title=f"pruned in {report.batches} batches, {report.seconds:.1f} s"
    )
    for state, counts in report.rows.items():
        table.add_row(state, *(str(counts[t]) for t in tables))
    return table


def prune(
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="count what would be deleted; delete nothing")
    ] = False,
    max_batches: Annotated[
        int | None,
        typer.Option(min=1, help="batches of each state at most (default: until none is left)"),
    ] = None,
    as_json: render_json.JsonFlag = False,
) -> None:
    """Delete finished jobs past their retention (TASKLEASE_RETAIN_*_SECONDS) with their
    events, effects, output, outbox rows, callbacks, messages and published state,
    TASKLEASE_PRUNE_BATCH_SIZE jobs per statement. Jobs held back: an Idempotency-Key within
    TASKLEASE_IDEMPOTENCY_WINDOW_SECONDS, an unfinished parent or child. With --json: the
    dry run's {"due": [{state, kept_for_seconds, due, held, oldest}]}, or what was pruned
    ({"rows": {state: {table: rows}}, "batches", "seconds"})."""
    s = runner.settings_or_exit()
    if not s.retention():
        if dry_run:  # no job is due: the same shape, empty
            if as_json:
                render_json.emit({"due": []})
            else:
                plain(
                    "every state is kept forever (TASKLEASE_RETAIN_*_SECONDS are 0): no job is due"
                )
            return
        if not as_json:  # the chart buckets and workers' rows are still pruned below
            plain(
                "every state is kept forever (TASKLEASE_RETAIN_*_SECONDS are 0): no job is pruned"
            )
    if dry_run:
        rows = runner.on_database(s, lambda db: retention.due(s, db))
        if as_json:
            keeps = s.retention()
            render_json.emit(
                {
                    "due": [
                        {**dataclasses.asdict(r), "kept_for_seconds": keeps[r.state]} for r in rows
                    ]
                }
            )
            return
        out.print(_due_table(s, rows))
        return
    with Progress(
        SpinnerColumn(), TextColumn("{task.description}"), TimeElapsedColumn(), console=err
    ) as bar:
        task = bar.add_task("pruning", total=None)
        done = {"jobs": 0, "batches": 0}

        def shown(state: str, counts: dict[str, int]) -> None:
            done["jobs"] += counts["jobs"]
            done["batches"] += 1
            bar.update(
                task,
                description=f"pruning {state}: {done['jobs']} jobs in {done['batches']} batches",
            )

        report = runner.on_database(
            s, lambda db: retention.prune(s, db, max_batches=max_batches, on_batch=shown)
        )
    if as_json:
        render_json.emit(report)
        return
    out.print(_report_table(report))
    if report.workers:
        plain(
            f"workers' rows not seen for TASKLEASE_RETAIN_WORKERS_SECONDS: {report.workers} deleted"
        )
