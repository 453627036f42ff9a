"""The schedules' tables (`tasklease schedules list|show|create`)."""

from __future__ import annotations

import datetime
import json
from typing import Any

from rich.table import Table
from rich.text import Text

from app.cli.listings import IdListing
from app.cli.render import PlainTable, cell, short, when


def _local(value: datetime.datetime | None) -> str:
    """A slot as its schedule's clock shows it (the upcoming slots are in its time zone)."""
    return value.strftime("%Y-%m-%d %H:%M %Z") if value else ""


def _schedule_state(row: dict[str, Any]) -> Text:
    return cell("enabled", "green") if row["enabled"] else cell("paused", "yellow")


def schedules(rows: list[dict[str, Any]]) -> IdListing:
    listing = IdListing(
        f"{len(rows)} schedules",
        ("tenant", "name", "cron", "timezone", "kind", "state", "next slot", "last error"),
        wrap=frozenset({"name", "next slot", "last error"}),
    )
    for r in rows:
        upcoming = r["upcoming"]
        listing.add(
            r["id"],
            cell(r["tenant"]),
            cell(r["name"]),
            cell(r["cron"]),
            cell(r["timezone"]),
            cell(r["kind"]),
            _schedule_state(r),
            cell(_local(upcoming[0]) if upcoming else ""),
            short(r["last_error"]),
        )
    return listing


def schedule(row: dict[str, Any]) -> Table:
    table = PlainTable(show_header=False, title=f"schedule {row['id']}")
    table.add_row("tenant", row["tenant"])
    table.add_row("name", row["name"])
    table.add_row("cron", f"{row['cron']} ({row['description']})")
    table.add_row("timezone", row["timezone"])
    table.add_row("kind", row["kind"])
    table.add_row("payload", json.dumps(row["payload"]))
    table.add_row("state", _schedule_state(row))
    table.add_row("next slots", "\n".join(_local(s) for s in row["upcoming"]))
    table.add_row("last slot", when(row["last_slot"]))
    table.add_row("last job", row["last_job_id"])
    table.add_row("last error", row["last_error"])
    return table
