"""API keys: `tasklease keys create|list|revoke`. A key is printed once, alone on stdout (so
`$(tasklease keys create ...)` captures it); the operator's table goes to stderr."""

from __future__ import annotations

from typing import Annotated

import typer

from app.cli import render, render_admin, render_json, runner
from app.cli.render import err, out
from app.services import auth

group = typer.Typer(
    help="API keys: one tenant each; shown once, stored hashed.", no_args_is_help=True
)


@group.command("create")
def create(
    tenant: Annotated[str, typer.Option(help="the tenant the key acts for")],
    name: Annotated[str, typer.Option(help="a label, e.g. who holds the key")] = "",
    admin: Annotated[
        bool, typer.Option("--admin", help="operator scope: every tenant's jobs, bulk redrive")
    ] = False,
) -> None:
    """Create an API key and print it. It is shown once; only a hash is stored."""
    s = runner.settings_or_exit()
    made = runner.on_database(
        s, lambda database: auth.create_key(database, tenant, name=name, admin=admin)
    )
    err.print(render_admin.keys([made.row], "created (the key below is shown once: keep it now)"))
    render.plain(made.key)


@group.command("list")
def list_(
    tenant: Annotated[str | None, typer.Option(help="only this tenant's keys")] = None,
    as_json: render_json.JsonFlag = False,
) -> None:
    """Every key: id, tenant, scope, when made and revoked (never the key itself). With
    --json: an array of {id, tenant, name, admin, created_at, revoked_at} (no API route
    lists keys)."""
    s = runner.settings_or_exit()
    rows = runner.on_database(s, lambda database: auth.list_keys(database, tenant))
    if as_json:
        render_json.emit(rows)
        return
    out.print(render_admin.keys(rows, f"{len(rows)} API keys"))


@group.command("revoke")
def revoke(key_id: Annotated[str, typer.Argument(help="the key's id (keys list)")]) -> None:
    """Revoke a key: the next request that carries it is refused."""
    s = runner.settings_or_exit()
    row = runner.on_database(s, lambda database: auth.revoke_key(database, key_id))
    out.print(render_admin.keys([row], "revoked"))
