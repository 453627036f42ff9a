"""``tasklease workers``: the worker processes and Lambda environments the API's database
knows (GET /v1/workers, an admin key), each alive, gone or stopped; ``--json`` for
scripts. It asks the API, as ``tasklease kinds`` does."""

from __future__ import annotations

import json
from typing import Annotated

import typer
from rich.text import Text

from app.cli import remote
from app.cli.render import PlainTable, err, out, when

STATUS_STYLE = {"alive": "green", "gone": "red", "stopped": "dim", "idle": "yellow"}


def _ago(seconds: float) -> str:
    return f"{seconds:.0f} s ago" if seconds < 120 else f"{seconds / 60:.0f} min ago"


def workers(
    as_json: Annotated[bool, typer.Option("--json", help="the workers as JSON")] = False,
    api_url: Annotated[
        str | None, typer.Option(help=f"the API's URL (default ${remote.API_URL})")
    ] = None,
    api_key: Annotated[
        str | None, typer.Option(help=f"an admin API key (default ${remote.API_KEY})")
    ] = None,
) -> None:
    """The worker processes and Lambda environments, most recently seen first (admin key)."""
    url, found = remote.ask(
        api_url, api_key, "tasklease workers asks the API", lambda c: c.workers()
    )
    if as_json:
        out.print_json(json.dumps({"workers": [w.model_dump(mode="json") for w in found]}))
        return
    if not found:
        err.print("no worker has registered yet: start one with `tasklease worker`")
        return
    table = PlainTable(
        "status",
        "name",
        "host",
        "pid",
        "carrier",
        "version",
        "started",
        "last seen",
        "running",
        "invocations",
        title=f"{len(found)} workers at {url}",
    )
    for w in found:
        lam = w.runtime == "lambda"
        table.add_row(
            Text(w.status, style=STATUS_STYLE.get(w.status, "")),
            w.name,
            w.host,
            w.pid,
            w.carrier,
            w.version,
            when(w.started_at),
            _ago(w.seen_seconds_ago),
            "" if lam else w.running,
            f"{w.invocations} ({w.messages} messages)" if lam else "",
        )
    out.print(table)
