"""Alerts: `tasklease alerts list|webhooks|set-webhook|clear-webhook|new-secret`
(app/services/alerts.py, docs/howto/alerts.md)."""

from __future__ import annotations

import json
from typing import Annotated, Any

import typer
from rich.markup import escape
from rich.table import Table

from app import webhook_signing
from app.cli import runner
from app.cli.render import PlainTable, cell, out, plain, short, when
from app.services import alerts

group = typer.Typer(
    help="Outgoing alerts: what was sent where, and the tenants' own webhooks.",
    no_args_is_help=True,
)

JsonOption = Annotated[bool, typer.Option("--json", help="the rows as JSON, one document")]


def _json(rows: list[dict[str, Any]]) -> None:
    plain(json.dumps(rows, default=str, indent=2))


def without(row: dict[str, Any], *names: str) -> dict[str, Any]:
    return {k: v for k, v in row.items() if k not in names}


def _alerts_table(rows: list[dict[str, Any]]) -> Table:
    table = PlainTable(
        "created", "type", "tenant", "job", "delivered", "attempts", "error", title="alerts"
    )
    for r in rows:
        if r["delivered_at"]:
            status = cell(", ".join(r["delivered"]) or "(nowhere configured)", "green")
        elif r["given_up_at"]:
            status = cell("given up", "red")
        else:
            status = cell(f"retry at {when(r['next_attempt_at'])}", "yellow")
        table.add_row(
            when(r["created_at"]),
            r["type"],
            r["tenant"] or "(deployment)",
            r["job_id"],
            status,
            r["attempts"],
            short(r["last_error"]),
        )
    return table


@group.command("list")
def list_(
    tenant: Annotated[str | None, typer.Option(help="only this tenant's")] = None,
    type_: Annotated[
        str | None, typer.Option("--type", help="only this type, e.g. job.dead_lettered")
    ] = None,
    limit: Annotated[int, typer.Option(min=1, max=1000)] = 50,
    as_json: JsonOption = False,
) -> None:
    """The newest alerts and where each was delivered (or why not yet)."""
    s = runner.settings_or_exit()
    rows = runner.on_database(
        s, lambda db: alerts.list_alerts(db, scope=tenant, type_=type_, limit=limit)
    )
    if as_json:  # the shape GET /v1/alerts answers: the alert's key is its id
        _json([{"id": r["dedup_key"], **without(r, "id", "dedup_key")} for r in rows])
    else:
        out.print(_alerts_table(rows))


@group.command("webhooks")
def webhooks(as_json: JsonOption = False) -> None:
    """The tenants' own alert webhooks (their secrets are never shown again)."""
    s = runner.settings_or_exit()
    rows = runner.on_database(s, alerts.tenant_webhooks)
    if as_json:
        _json(rows)
        return
    table = PlainTable("tenant", "url", "set", title="tenants' alert webhooks")
    for r in rows:
        table.add_row(r["tenant"], r["url"], when(r["updated_at"]))
    out.print(table)


@group.command("set-webhook")
def set_webhook(
    tenant: Annotated[str, typer.Option(help="the tenant whose alerts go there too")],
    url: Annotated[str, typer.Option(help="an http:// or https:// URL")],
    secret: Annotated[
        str | None,
        typer.Option(help="whsec_ then base64; omitted: one is made and printed once"),
    ] = None,
) -> None:
    """Send a tenant's alerts (its dead letters, stalls, token budget) to its own webhook
    too, signed with its own secret."""
    s = runner.settings_or_exit()
    hook = runner.on_database(s, lambda db: alerts.set_tenant_webhook(db, tenant, url, secret))
    out.print(f"{escape(hook.tenant)}: alerts go to {escape(hook.url)}")
    if hook.secret:
        out.print("its signing secret (shown once; give it to the receiver):")
        plain(hook.secret)


@group.command("clear-webhook")
def clear_webhook(tenant: Annotated[str, typer.Option(help="the tenant")]) -> None:
    """Stop sending a tenant's alerts to its own webhook."""
    s = runner.settings_or_exit()
    runner.on_database(s, lambda db: alerts.clear_tenant_webhook(db, tenant))
    out.print(f"{escape(tenant)}: no alert webhook of its own")


@group.command("new-secret")
def new_secret() -> None:
    """Print a fresh signing secret (for TASKLEASE_ALERT_WEBHOOK_SECRET or --secret)."""
    plain(webhook_signing.new_secret())
