"""Everything the CLI prints. Safe by construction: every table is a ``PlainTable``, whose
cells, headers and title are ``Text`` (a value is shown as written, never read as rich
markup: a job's error holding ``[/]`` used to crash the command that showed it, and
``[permanent]`` vanished into a style). Colour comes only from ``Text`` styles.

Job ids are never cut (operators paste them into ``--job``): a list of jobs is a table when
it fits the terminal with the id whole and no word cut, otherwise one block per job.

Output meant for a shell or a program (export lines, ids, keys) goes through ``plain``:
one line each, never wrapped, never styled, whatever the terminal or pipe."""

from __future__ import annotations

import datetime
import json
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from rich.cells import cell_len
from rich.console import Console, ConsoleOptions, RenderResult
from rich.padding import Padding
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


def children(rows: list[dict[str, Any]], total: int) -> IdListing:
    shown = f"{total} children" if len(rows) == total else f"{total} children, first {len(rows)}"
    listing = IdListing(shown, ("kind", "state", "created"), wrap=frozenset({"created"}))
    for r in rows:
        listing.add(r["id"], cell(r["kind"]), state(r["state"]), cell(when(r["created_at"])))
    return listing


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


@dataclass
class IdListing:
    """Rows keyed by a job id, with the id always whole: a table when the terminal is wide
    enough for it with the id on one line and no word cut, otherwise one block per row (the
    id on a line of its own, then the other columns as ``name: value``). Only the columns
    named in ``wrap`` wrap in the table; the others stay on one line, like the id."""

    title: str
    headers: Sequence[str]
    wrap: frozenset[str]
    rows: list[tuple[str, Sequence[Text]]] = field(default_factory=list)

    def add(self, row_id: object, *cells: Text) -> None:
        self.rows.append((str(row_id), cells))

    def _needs(self) -> list[tuple[int, int]]:
        """Per column, the id's first: (the least width that cuts no word, the width
        that wraps nothing). A column that does not wrap needs its longest cell."""
        needs = [(max((cell_len(row_id) for row_id, _ in self.rows), default=2),) * 2]
        for i, header in enumerate(self.headers):
            texts = [header, *(cells[i].plain for _, cells in self.rows)]
            whole = max(cell_len(t) for t in texts)
            words = [w for t in texts for w in t.split()] or [""]
            least = max(cell_len(w) for w in words) if header in self.wrap else whole
            needs.append((least, whole))
        return needs

    def _widths(self, available: int) -> list[int] | None:
        """Each column's width (None: the table does not fit): every column its least,
        then what is left to the wrapping columns in order, up to what they want. A
        border and a space either side of each column take the rest."""
        needs = self._needs()
        spare = available - (3 * len(needs) + 1) - sum(least for least, _ in needs)
        if spare < 0:
            return None
        widths = []
        for least, whole in needs:
            extra = min(spare, whole - least)
            widths.append(least + extra)
            spare -= extra
        return widths

    def table(self, widths: Sequence[int]) -> Table:
        table = PlainTable(
            Column(header=Text("id"), no_wrap=True, width=widths[0]),
            *(
                Column(header=Text(h), no_wrap=h not in self.wrap, overflow="fold", width=w)
                for h, w in zip(self.headers, widths[1:], strict=True)
            ),
            title=self.title,
        )
        for row_id, cells in self.rows:
            table.add_row(row_id, *cells)
        return table

    def blocks(self) -> Iterable[Text | Padding]:
        yield Text(self.title)
        for row_id, cells in self.rows:
            # Never wrapped nor cropped: on a terminal narrower than an id, the terminal
            # folds it, and a copy of the line is still the whole id.
            yield Text(row_id, style="bold", no_wrap=True, overflow="ignore")
            pairs = [(name, c) for name, c in zip(self.headers, cells, strict=True) if c.plain]
            line = Text(" · ").join(Text.assemble((f"{name}: ", "dim"), c) for name, c in pairs)
            yield Padding(line, (0, 0, 0, 2), expand=False)

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        widths = self._widths(options.max_width)
        if widths is None:
            yield from self.blocks()
        else:
            yield self.table(widths)


def print_listing(listing: IdListing, console: Console = out) -> None:
    """Print a listing; not cropped, so an id wider than the terminal stays whole."""
    console.print(listing, crop=False)


def _attempts(r: dict[str, Any]) -> str:
    return f"{r['attempt']}/{r['max_attempts']}"


def jobs(rows: list[dict[str, Any]]) -> IdListing:
    """Jobs, newest first (by creation: the time shown). A waiting job's row says what it
    waits for (``waiting_for``, as the API answers it) and until when."""
    listing = IdListing(
        f"{len(rows)} jobs",
        (
            "tenant",
            "kind",
            "state",
            "runs",
            "attempts used",
            "waiting for",
            "until",
            "created",
            "last error",
        ),
        wrap=frozenset({"attempts used", "waiting for", "until", "created", "last error"}),
    )
    for r in rows:
        w = r.get("waiting_for")
        listing.add(
            r["id"],
            cell(r["tenant"]),
            cell(r["kind"]),
            state(r["state"]),
            cell(r["runs"]),
            cell(_attempts(r)),
            cell(wait_what(w) if w else ""),
            cell(when(w["until"]) if w else ""),
            cell(when(r["created_at"])),
            short(r["last_error"]),
        )
    return listing


def dead_letters(rows: list[dict[str, Any]], title: str) -> IdListing:
    listing = IdListing(
        title,
        ("tenant", "kind", "attempts", "by", "dead-lettered", "last error"),
        wrap=frozenset({"dead-lettered", "last error"}),
    )
    for r in rows:
        listing.add(
            r["id"],
            cell(r["tenant"]),
            cell(r["kind"]),
            cell(_attempts(r)),
            cell(r["dead_lettered_by"]),
            cell(when(r["finished_at"])),
            short(r["last_error"]),
        )
    return listing


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
