"""Everything the CLI prints. Safe by construction: every table is a ``PlainTable``, whose
cells, headers and title are ``Text`` (a value is shown as written, never read as rich
markup: a job's error holding ``[/]`` used to crash the command that showed it, and
``[permanent]`` vanished into a style). Colour comes only from ``Text`` styles.

The lists of jobs, where an id is never cut, are app/cli/listings.py.

Output meant for a shell or a program (export lines, ids, keys) goes through ``plain``:
one line each, never wrapped, never styled, whatever the terminal or pipe."""

from __future__ import annotations

import datetime
import json
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.style import StyleType
from rich.table import Column, Table
from rich.text import Text

from app.states import STYLE, JobState

if TYPE_CHECKING:
    from app.services.redrive import RedriveReport
    from app.store.messages import Message

out = Console()
err = Console(stderr=True)

JOB_FIELDS = (
    "tenant",
    "kind",
    "priority",
    "state",
    "runs",
    "attempts used",
    "redrives",
    "lease_owner",
    "last_error",
    "created_at",
    "finished_at",
)
# A list shows this much of an error (cut with an ellipsis), `jobs show` all of it.
ERROR_CHARS = 80


def plain(*lines: str) -> None:
    """Lines for a shell or a program (``eval "$(tasklease queues create)"``, ``$(tasklease
    submit ...)``): written as they are, one per line, never wrapped or styled."""
    for line in lines:
        sys.stdout.write(line + "\n")
    sys.stdout.flush()


def cell(value: Any, style: StyleType = "") -> Text:
    """A value as table text, never markup: empty for NULL."""
    return Text("" if value is None else str(value), style=style)


def state(value: str) -> Text:
    """A job state in its colour (app/states.py)."""
    return Text(value, style=STYLE.get(JobState(value), "white"))


def short(value: str | None, limit: int = ERROR_CHARS) -> Text:
    """Long text cut to ``limit`` characters with an ellipsis saying so."""
    value = value or ""
    return cell(value if len(value) <= limit else value[: limit - 1] + "…")


class PlainTable(Table):
    """A table whose title, headers and cells are ``Text``: whatever a cell holds is shown
    as written. Every table the CLI prints is one of these."""

    def __init__(self, *headers: str | Column, title: str | None = None, **kwargs: Any) -> None:
        columns = [
            h if isinstance(h, Column) else Column(header=Text(h), overflow="fold") for h in headers
        ]
        for c in columns:
            if not isinstance(c.header, Text):
                c.header = Text(str(c.header))
        kwargs.setdefault("title_justify", "left")
        super().__init__(*columns, title=None if title is None else Text(title), **kwargs)

    def add_row(
        self,
        *renderables: Any,
        style: StyleType | None = None,
        end_section: bool = False,
    ) -> None:
        super().add_row(
            *(r if isinstance(r, Text) else cell(r) for r in renderables),
            style=style,
            end_section=end_section,
        )


def when(value: datetime.datetime | None) -> str:
    return value.strftime("%Y-%m-%d %H:%M:%S") if value else ""


def clock(value: datetime.datetime) -> str:
    """Time of day to the millisecond, for events that follow each other closely."""
    return value.strftime("%H:%M:%S.%f")[:-3]


def job(
    job_id: object,
    row: dict[str, Any],
    waiting_for: dict[str, Any] | None = None,
    lease_owner: str | None = None,
) -> Table:
    """A job's fields; ``lease_owner``: the live lease's holder (None: no lease)."""
    table = PlainTable(show_header=False, title=f"job {job_id}")
    shown = {
        "attempts used": f"{row['attempt']} of {row['max_attempts']}",
        "lease_owner": lease_owner,
    }
    for key in JOB_FIELDS:
        table.add_row(key, state(row[key]) if key == "state" else shown.get(key, row.get(key)))
        if key == "state" and waiting_for is not None:
            table.add_row("waiting for", waiting(waiting_for))
    if row.get("parent_id") is not None:
        table.add_row("parent", row["parent_id"])
    if row.get("deadline") is not None:  # the whole run's: past it, it ends dead-lettered
        table.add_row("deadline", when(row["deadline"]))
    # The version of its kind it first started on: what a changed kind replays it against.
    table.add_row("kind version", kind_version(row))
    result = row["result"]
    table.add_row("result", json.dumps(result) if result is not None else "")
    return table


def kind_version(row: dict[str, Any]) -> str:
    """The version of its kind a job first started on, or why none is recorded."""
    if row.get("kind_version"):
        return f"version {row['kind_version']}"
    return "not recorded (started before versions were)" if row.get("runs") else "not started yet"


def waiting(w: dict[str, Any]) -> str:
    """What a waiting job waits for, in one line: ``timer run_at until 2026-…``,
    ``callback approve until …``, ``children fan (at least 3 of 5, tolerating 1)``."""
    text = wait_what(w)
    if w.get("until") is not None:
        text += f" until {when(w['until'])}"
    return text


def wait_what(w: dict[str, Any]) -> str:
    """What a job waits for, without its deadline: ``timer nap-1``, ``callback approve``,
    ``children fan (at least 3 of 5, tolerating 1)``."""
    text = f"{w['kind']} {w['key'] or ''}".rstrip()
    rule = w.get("rule")
    if rule:
        need = (
            f"all {rule['count']}" if rule["all"] else f"at least {rule['need']} of {rule['count']}"
        )
        text += f" ({need}, tolerating {rule['tolerate']})"
    return text


def callbacks(rows: list[dict[str, Any]]) -> Table:
    table = PlainTable(
        "key", "state", "deadline", "heartbeats", "answered", "error", "asks", title="callbacks"
    )
    for c in rows:
        table.add_row(
            c["key"],
            c["state"],
            when(c["deadline"]),
            c["heartbeats"],
            when(c["answered_at"]),
            short(c["error"]),
            short(asks(c.get("details"))),
        )
    return table


def asks(details: Any) -> str:
    """What a callback asks (its details) in one line: an agent's tool call that needs
    approval as ``save_note {"note": "…"}``, other details as JSON."""
    if details is None:
        return ""
    if isinstance(details, dict) and isinstance(details.get("tool"), str):
        return f"{details['tool']} {json.dumps(details.get('args'), ensure_ascii=False)}"
    return json.dumps(details, ensure_ascii=False)


# A published value in `jobs show`: its JSON, cut to this many characters.
STATE_VALUE_CHARS = 200


def published_state(rows: list[dict[str, Any]]) -> Table:
    """What the job published (ctx.set_state): each key's value as JSON, as written."""
    table = PlainTable("key", "value", "version", "attempt", "set", title="state")
    for r in rows:
        value = json.dumps(r["value"], ensure_ascii=False)
        table.add_row(
            r["key"],
            short(value, STATE_VALUE_CHARS),
            r["version"],
            r["attempt"],
            when(r["updated_at"]),
        )
    return table


def timeline(events: list[dict[str, Any]]) -> Table:
    table = PlainTable("at", "from", "to", "attempt", "worker", "detail", title="timeline")
    for e in events:
        table.add_row(
            clock(e["at"]),
            e["from_state"],
            state(e["to_state"]),
            e["attempt"],
            e["worker"],
            e["detail"],
        )
    return table


def effects(rows: list[dict[str, Any]]) -> Table:
    """A job's effects; a fork's inherited ones name the job that recorded them."""
    table = PlainTable(
        "#", "key", "attempt", "worker", "recorded", "inherited from", title="effects"
    )
    for f in rows:
        table.add_row(
            f["seq"],
            f["key"],
            f["attempt"],
            f["worker"],
            clock(f["recorded_at"]),
            f.get("inherited_from") or "",
        )
    return table


def redrive_summary(report: RedriveReport) -> Table:
    table = PlainTable(
        "moved from the DLQ",
        "jobs reset",
        "sent anew (no dead letter found)",
        "stale deleted",
        "left in the DLQ",
        title="summary",
    )
    table.add_row(
        report.moved,
        report.reset,
        report.sent_without_dead_letter,
        report.stale_deleted,
        report.left_in_dlq,
    )
    return table


def messages(rows: Sequence[Message]) -> Table:
    """A job's messages (store records), oldest first: what each said and when it was read."""
    table = PlainTable("id", "topic", "body", "sent", "read", title="messages")
    for m in rows:
        table.add_row(
            str(m.id),
            cell(m.topic),
            short(json.dumps(m.body)),
            when(m.created_at),
            when(m.consumed_at) if m.consumed_at else "unread",
        )
    return table
