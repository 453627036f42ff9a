"""Per-tenant limits: `tasklease limits set|clear|list` (app/services/tenant_limits.py)."""

from __future__ import annotations

from typing import Annotated

import typer
from rich.markup import escape

from app import errors
from app.cli import render_admin, render_json, runner
from app.cli.render import err, out
from app.services import auth, tenant_limits

group = typer.Typer(
    help="Per-tenant limits on job submission and on jobs running at once.", no_args_is_help=True
)


def _valid_tenant_or_exit(tenant: str) -> None:
    try:
        auth.check_tenant(tenant)
    except errors.BadRequest as exc:
        err.print(f"[red]error:[/] {escape(str(exc))}")
        raise typer.Exit(2) from exc


@group.command("set")
def set_(
    tenant: Annotated[str, typer.Argument(help="the tenant")],
    daily_tokens: Annotated[
        int | None, typer.Option(min=1, help="model tokens a UTC day (provider budgets)")
    ] = None,
    rate: Annotated[
        float | None, typer.Option(min=0.001, help="jobs per second, refilled steadily")
    ] = None,
    burst: Annotated[int | None, typer.Option(min=1, help="jobs at once after a pause")] = None,
    max_in_flight: Annotated[
        int | None, typer.Option(min=1, help="unfinished jobs the tenant may have")
    ] = None,
    max_running: Annotated[
        int | None,
        typer.Option(min=1, help="jobs of the tenant leased or running at once (the claim's cap)"),
    ] = None,
) -> None:
    """Override the deployment's limits for one tenant (the ones not given stay)."""
    s = runner.settings_or_exit()
    _valid_tenant_or_exit(tenant)
    if daily_tokens is not None:
        runner.on_database(
            s, lambda database: tenant_limits.set_daily_tokens(database, tenant, daily_tokens)
        )
        out.print(f"{escape(tenant)}: {daily_tokens} model tokens a day (UTC)")
    rows = runner.on_database(
        s,
        lambda database: tenant_limits.set_limits(
            database,
            tenant,
            rate_per_second=rate,
            burst=burst,
            max_in_flight=max_in_flight,
            max_running=max_running,
        ),
    )
    out.print(render_admin.limits(s, rows))


@group.command("clear")
def clear(tenant: Annotated[str, typer.Argument(help="the tenant")]) -> None:
    """Drop a tenant's overrides: it gets the deployment's defaults again."""
    s = runner.settings_or_exit()
    cleared = runner.on_database(s, lambda database: tenant_limits.clear_limits(database, tenant))
    out.print(f"{escape(tenant)}: {'back to the defaults' if cleared else 'had no overrides'}")


@group.command("list")
def list_(as_json: render_json.JsonFlag = False) -> None:
    """Each tenant's limits (override or default), its unfinished and its running jobs.
    With --json: {"defaults": the deployment's, "items": each tenant's overrides (null:
    the default) and counts}."""
    s = runner.settings_or_exit()
    rows = runner.on_database(s, tenant_limits.list_limits)
    if as_json:
        render_json.emit({"defaults": render_admin.default_limits(s), "items": rows})
        return
    out.print(render_admin.limits(s, rows))
