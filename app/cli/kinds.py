"""``tasklease kinds``: the job kinds the running API serves (GET /v1/kinds), each with
its timeout, its attempt budget, the fields of its payload, its flow control by key
(docs/howto/flow-control.md) and its jobs by state (the key's tenant's; an admin key's
every tenant's); ``--json`` gives each payload's whole JSON schema, for scripts. It asks
the API, not this process: what the deployment's TASKLEASE_KINDS loaded is what it may be
sent."""

from __future__ import annotations

from typing import Any

from rich.markup import escape
from rich.table import Table

from app.cli import remote, render_flow, render_json
from app.cli.render import err, out


def _fields(schema: dict[str, Any]) -> str:
    """The payload's top-level fields, required ones first and marked *."""
    props = schema.get("properties") or {}
    required = set(schema.get("required") or [])
    names = sorted(props, key=lambda n: (n not in required, n))
    return ", ".join(f"{n}*" if n in required else n for n in names) or "(none)"


def _counts(counts: dict[str, int]) -> str:
    """The states it has jobs in, in the API's order: "queued 3, succeeded 40"."""
    return ", ".join(f"{s} {n}" for s, n in counts.items() if n) or "no jobs"


def _versions(versions: list[str], policy: str) -> str:
    """Its versions served, newest last, and what a waiting job does: "1, 2 (pin)"."""
    return f"{', '.join(versions)} ({policy})"


def kinds(
    as_json: render_json.JsonFlag = False,
    api_url: remote.ApiUrl = None,
    api_key: remote.ApiKey = None,
) -> None:
    """The job kinds the API serves: name, timeout, attempts, payload fields, jobs by state
    and flow control by key (a key from the payload, limits per key, if_active, debounce)."""
    url, found = remote.ask(api_url, api_key, "tasklease kinds asks the API", lambda c: c.kinds())
    if as_json:
        render_json.emit({"kinds": found})  # GET /v1/kinds' shape, schemas whole
        return
    if not found:
        err.print("the API serves no job kinds: its TASKLEASE_KINDS names none")
        return
    table = Table(title=f"{len(found)} job kinds at {escape(url)}", title_justify="left")
    for column in (
        "kind",
        "versions",
        "timeout",
        "attempts",
        "payload (* required)",
        "jobs",
        "flow control by key",
        "description",
    ):
        table.add_column(column, overflow="fold")
    for k in found:
        table.add_row(
            escape(k.name),
            escape(_versions(k.versions, k.on_version_change)),
            f"{k.timeout_seconds} s",
            str(k.max_attempts),
            escape(_fields(k.payload_schema)),
            escape(_counts(k.counts)),
            escape(render_flow.kind_flow(k.flow)),
            escape(k.description),
        )
    out.print(table)
