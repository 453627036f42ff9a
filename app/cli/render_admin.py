"""The tables of the admin commands: API keys (`tasklease keys`) and tenant limits
(`tasklease limits`), built from app/cli/render.py's cells."""

from __future__ import annotations

from typing import Any

from rich.table import Column, Table
from rich.text import Text

from app.cli.render import PlainTable, cell, when
from app.settings import config
from app.store.records import TenantUsage


def keys(rows: list[dict[str, Any]], title: str) -> Table:
    table = PlainTable(
        Column(header=Text("key id"), no_wrap=True),
        "tenant",
        "name",
        "scope",
        "created",
        "revoked",
        title=title,
    )
    for r in rows:
        table.add_row(
            r["id"],
            r["tenant"],
            r["name"],
            cell("admin", "bold") if r["admin"] else "tenant",
            when(r["created_at"]),
            cell(when(r["revoked_at"]), "red"),
        )
    return table


def default_limits(s: config.Settings) -> dict[str, float | int | None]:
    """The deployment's limits, by the names a tenant's overrides have (``limits list``)."""
    return {
        "rate_per_second": s.rate_limit_per_second,
        "burst": s.rate_limit_burst,
        "max_in_flight": s.max_jobs_in_flight,
        "max_running": s.max_running_per_tenant,
        "daily_tokens": s.tenant_daily_tokens,
    }


def limits(s: config.Settings, rows: list[TenantUsage]) -> Table:
    """Each tenant's limits: its override in bold, or the deployment's default."""

    def value(override: float | None, default: float) -> Text:
        if override is not None:
            return cell(f"{override:g}", "bold")
        return cell(f"{default:g} (default)")

    table = PlainTable(
        "tenant",
        "jobs/s",
        "burst",
        "max in flight",
        "in flight now",
        "max running",
        "running now",
        "parked now",
        "tokens/day",
        title="per-tenant limits (admission on POST /v1/jobs; running at the claim)",
    )
    for r in rows:
        table.add_row(
            r.tenant,
            value(r.rate_per_second, s.rate_limit_per_second),
            value(r.burst, s.rate_limit_burst),
            value(r.max_in_flight, s.max_jobs_in_flight),
            r.in_flight,
            value(r.max_running, s.max_running_per_tenant),
            r.running,
            r.parked,
            _daily(r.daily_tokens, s.tenant_daily_tokens),
        )
    return table


def _daily(override: int | None, default: int | None) -> Text:
    """A tenant's model tokens per UTC day: its own, the default, or off."""
    if override is not None:
        return cell(f"{override:,}", "bold")
    return cell(f"{default:,} (default)" if default is not None else "off")
