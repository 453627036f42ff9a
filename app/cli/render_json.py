"""``--json``: what a read command prints for a script instead of its rich tables.

One option and one printer, shared by every read command, so that each answers the same
way: ONE JSON document on stdout (nothing else there: no table, no markup, no progress),
the HTTP API's shape for the same data (the API's pydantic models, ``model_dump(mode=
"json")``: a list the API answers as an array is an array, a page is ``{"items": ...}``),
notes and errors on stderr as without ``--json``, and the same exit codes.

A command adds it in three lines::

    from app.cli import render_json

    @group.command("list")
    def list_(..., as_json: render_json.JsonFlag = False) -> None:
        rows = runner.on_database(s, ...)
        if as_json:
            render_json.emit(JobPage(items=[JobPublic.of(r) for r in rows], next_cursor=None))
            return
        listings.print_listing(...)

``emit`` takes a pydantic model, a dataclass record, or lists and dicts of them (and of
plain values, datetimes and UUIDs), so a command that has no API route (``keys list``)
prints its service records as they are. A command that follows something live (``jobs
watch --json``) prints one compact document per line with ``emit_line``."""

from __future__ import annotations

import json
import sys
from typing import Annotated, Any

import typer
from pydantic_core import to_jsonable_python

JsonFlag = Annotated[
    bool,
    typer.Option(
        "--json",
        help="print one JSON document on stdout (the HTTP API's shape), nothing else",
    ),
]


def jsonable(doc: Any) -> Any:
    """``doc`` as plain JSON values: models dumped as the API answers them (by alias,
    ``mode="json"``), dataclasses as dicts, datetimes in ISO 8601, UUIDs as strings."""
    return to_jsonable_python(doc, by_alias=True)


def emit(doc: Any) -> None:
    """Print ``doc`` as one indented JSON document on stdout (never wrapped or styled,
    whatever the terminal). NaN or infinity is an error, not invalid JSON."""
    sys.stdout.write(json.dumps(jsonable(doc), indent=2, ensure_ascii=False, allow_nan=False))
    sys.stdout.write("\n")
    sys.stdout.flush()


def emit_line(doc: Any) -> None:
    """Print ``doc`` as one compact JSON line and flush it (a stream of events, read by
    ``jq`` or a program line by line as they come)."""
    sys.stdout.write(json.dumps(jsonable(doc), ensure_ascii=False, allow_nan=False) + "\n")
    sys.stdout.flush()
