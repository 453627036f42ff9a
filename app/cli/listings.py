"""The CLI's lists of jobs (and of other rows keyed by a job id): ``jobs list``, a job's
children in ``jobs show``, the dead letters, the schedules (app/cli/render_schedules.py).

Job ids are never cut (operators paste them into ``--job``): a list of jobs is a table when
it fits the terminal with the id whole and no word cut, otherwise one block per job. Cells
are ``Text``, built with app/cli/render.py's helpers, so a value is shown as written."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from rich.cells import cell_len
from rich.console import Console, ConsoleOptions, RenderResult
from rich.padding import Padding
from rich.table import Column, Table
from rich.text import Text

from app.cli.render import PlainTable, cell, out, short, state, wait_what, when


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


def children(rows: list[dict[str, Any]], total: int) -> IdListing:
    shown = f"{total} children" if len(rows) == total else f"{total} children, first {len(rows)}"
    listing = IdListing(shown, ("kind", "state", "created"), wrap=frozenset({"created"}))
    for r in rows:
        listing.add(r["id"], cell(r["kind"]), state(r["state"]), cell(when(r["created_at"])))
    return listing
