"""``tasklease charts``: jobs submitted, succeeded, failed and dead-lettered over the last
hour, day or week, and p50/p95 latency per kind (what GET /v1/charts and the web view's
Charts page show), read from the database as an operator: every tenant, or --tenant.
``--json`` prints the series whole, as the API answers them."""

from __future__ import annotations

import json
from typing import Annotated, Any, Literal

import typer
from rich.text import Text

from app.cli import runner
from app.cli.render import PlainTable, out, plain
from app.services import charts as charting


def _ms(v: float | None) -> str:
    if v is None:
        return "none"
    return f"{v / 1000:.2f} s" if v >= 1000 else f"{v:.0f} ms"


def summary(found: dict[str, Any]) -> str:
    t = found["totals"]
    return (
        f"last {found['window']} ({found['width_seconds']} s buckets): {t['submitted']} "
        f"submitted, {t['succeeded']} succeeded, {t['failed']} failed attempts, "
        f"{t['dead_lettered']} dead-lettered"
    )


def table(found: dict[str, Any]) -> PlainTable:
    """One row a kind (every kind together first): finished jobs and their percentiles."""
    rows = PlainTable("kind", "finished", "p50", "p95", "run p50", "run p95", title="latency")
    for k in found["latency"]:
        rows.add_row(
            k["kind"] or "every kind",
            str(k["finished"]),
            *(_ms(k[f]) for f in ("p50_ms", "p95_ms", "run_p50_ms", "run_p95_ms")),
        )
    return rows


def charts(
    window: Annotated[
        Literal["hour", "day", "week"], typer.Option(help="hour, day or week")
    ] = "hour",
    kind: Annotated[str | None, typer.Option(help="only this kind")] = None,
    tenant: Annotated[
        str | None, typer.Option(help="only this tenant (default: every one)")
    ] = None,
    as_json: Annotated[
        bool, typer.Option("--json", help="the series as JSON (GET /v1/charts' answer)")
    ] = False,
) -> None:
    """Throughput and latency per kind over the last hour, day or week."""
    s = runner.settings_or_exit()
    found = runner.on_database(
        s, lambda db: charting.series(db, window=window, tenant=tenant, kind=kind)
    )
    if as_json:
        plain(json.dumps(found, default=str))
    else:
        out.print(Text(summary(found)))
        out.print(table(found))
