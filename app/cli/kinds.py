"""``tasklease kinds``: the job kinds the running API serves (GET /v1/kinds), each with
its timeout, its attempt budget and the fields of its payload; ``--json`` gives each
payload's whole JSON schema, for scripts. It asks the API, not this process: what the
deployment's TASKLEASE_KINDS loaded is what it may be sent."""

from __future__ import annotations

from typing import Any

import typer
from rich.markup import escape
from rich.table import Table

from app.cli import remote, render_json
from app.cli.render import err, out


def _fields(schema: dict[str, Any]) -> str:
    """The payload's top-level fields, required ones first and marked *."""
    props = schema.get("properties") or {}
    required = set(schema.get("required") or [])
    names = sorted(props, key=lambda n: (n not in required, n))
    return ", ".join(f"{n}*" if n in required else n for n in names) or "(none)"


def kinds(
    as_json: render_json.JsonFlag = False,
    api_url: remote.ApiUrl = None,
    api_key: remote.ApiKey = None,
) -> None:
    """The job kinds the API serves: name, timeout, attempts and payload fields."""
    from app.client import APIError, Client

    url, key = remote.connection_or_exit(api_url, api_key, "tasklease kinds asks the API")
    try:
        with Client(url, key) as tl:
            found = tl.kinds()
    except APIError as exc:
        err.print(f"[red]the API refused: {escape(str(exc))}[/]")
        raise typer.Exit(1) from exc
    if as_json:
        render_json.emit({"kinds": found})  # GET /v1/kinds' shape, schemas whole
        return
    if not found:
        err.print("the API serves no job kinds: its TASKLEASE_KINDS names none")
        return
    table = Table(title=f"{len(found)} job kinds at {escape(url)}", title_justify="left")
    for column in ("kind", "timeout", "attempts", "payload (* required)", "description"):
        table.add_column(column, overflow="fold")
    for k in found:
        table.add_row(
            escape(k.name),
            f"{k.timeout_seconds} s",
            str(k.max_attempts),
            escape(_fields(k.payload_schema)),
            escape(k.description),
        )
    out.print(table)
