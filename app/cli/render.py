"""Everything the CLI prints as a table. Values from the database or from users are escaped
with rich.markup.escape: a job's error or a key's name is text, never markup (an error
holding ``[/]`` used to crash the command that showed it)."""

from __future__ import annotations

import datetime
import json
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from app import config
from app.states import styled
from app.store.records import TenantUsage

if TYPE_CHECKING:
    from app.services.redrive import RedriveReport

out = Console()
err = Console(stderr=True)

JOB_FIELDS = (
    "tenant",
    "kind",
    "state",
    "attempt",
    "max_attempts",
    "redrives",
    "runs",
    "lease_owner",
    "last_error",
    "created_at",
    "finished_at",
)


def cell(value: Any) -> str:
    """A value as table text: empty for NULL, escaped otherwise."""
    return "" if value is None else escape(str(value))


def when(value: datetime.datetime | None) -> str:
    return value.strftime("%Y-%m-%d %H:%M:%S") if value else ""


def clock(value: datetime.datetime) -> str:
    """Time of day to the millisecond, for events that follow each other closely."""
    return value.strftime("%H:%M:%S.%f")[:-3]


def job(job_id: object, row: dict[str, Any]) -> Table:
    table = Table(show_header=False, title=f"job {job_id}", title_justify="left")
    for key in JOB_FIELDS:
        table.add_row(key, styled(row[key]) if key == "state" else cell(row[key]))
    result = row["result"]
    table.add_row("result", escape(json.dumps(result)) if result is not None else "")
    return table


def timeline(events: list[dict[str, Any]]) -> Table:
    table = Table(
        "at", "from", "to", "attempt", "worker", "detail", title="timeline", title_justify="left"
    )
    for e in events:
        table.add_row(
            clock(e["at"]),
            cell(e["from_state"]),
            styled(e["to_state"]),
            str(e["attempt"]),
            cell(e["worker"]),
            cell(e["detail"]),
        )
    return table


def effects(rows: list[dict[str, Any]]) -> Table:
    table = Table(
        "#", "key", "attempt", "worker", "recorded", title="effects", title_justify="left"
    )
    for f in rows:
        table.add_row(
            str(f["seq"]),
            cell(f["key"]),
            str(f["attempt"]),
            cell(f["worker"]),
            clock(f["recorded_at"]),
        )
    return table


# The columns every list of jobs starts with.
JOB_COLUMNS = ("id", "tenant", "kind")


def _job_cells(r: dict[str, Any]) -> tuple[str, str, str]:
    return str(r["id"]), cell(r["tenant"]), cell(r["kind"])


def _attempts(r: dict[str, Any]) -> str:
    return f"{r['attempt']}/{r['max_attempts']}"


def jobs(rows: list[dict[str, Any]]) -> Table:
    table = Table(
        *JOB_COLUMNS,
        "state",
        "attempt",
        "created",
        "last error",
        title=f"{len(rows)} jobs",
        title_justify="left",
    )
    for r in rows:
        table.add_row(
            *_job_cells(r),
            styled(r["state"]),
            _attempts(r),
            when(r["created_at"]),
            cell((r["last_error"] or "")[:60]),
        )
    return table


def dead_letters(rows: list[dict[str, Any]], title: str) -> Table:
    table = Table(
        *JOB_COLUMNS,
        "attempts",
        "by",
        "dead-lettered",
        "last error",
        title=title,
        title_justify="left",
    )
    for r in rows:
        table.add_row(
            *_job_cells(r),
            _attempts(r),
            cell(r["dead_lettered_by"]),
            when(r["finished_at"]),
            cell((r["last_error"] or "")[:80]),
        )
    return table


def redrive_summary(report: RedriveReport) -> Table:
    table = Table(
        "moved from the DLQ",
        "jobs reset",
        "sent anew (no dead letter found)",
        "stale deleted",
        "left in the DLQ",
        title="summary",
        title_justify="left",
    )
    table.add_row(
        str(report.moved),
        str(report.reset),
        str(report.sent_without_dead_letter),
        str(report.stale_deleted),
        str(report.left_in_dlq),
    )
    return table


def keys(rows: list[dict[str, Any]], title: str) -> Table:
    table = Table("key id", "tenant", "name", "scope", "created", "revoked", title=title)
    table.title_justify = "left"
    for r in rows:
        table.add_row(
            cell(r["id"]),
            cell(r["tenant"]),
            cell(r["name"]),
            "[bold]admin[/]" if r["admin"] else "tenant",
            when(r["created_at"]),
            f"[red]{when(r['revoked_at'])}[/]" if r["revoked_at"] else "",
        )
    return table


def limits(s: config.Settings, rows: list[TenantUsage]) -> Table:
    """Each tenant's limits: its override in bold, or the deployment's default."""

    def value(override: float | None, default: float) -> str:
        return f"[bold]{override:g}[/]" if override is not None else f"{default:g} (default)"

    table = Table("tenant", "jobs/s", "burst", "max in flight", "in flight now")
    table.title = "per-tenant limits on POST /v1/jobs"
    table.title_justify = "left"
    for r in rows:
        table.add_row(
            cell(r.tenant),
            value(r.rate_per_second, s.rate_limit_per_second),
            value(r.burst, s.rate_limit_burst),
            value(r.max_in_flight, s.max_jobs_in_flight),
            str(r.in_flight),
        )
    return table
