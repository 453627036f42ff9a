"""``tasklease jobs watch``: follow the API's stream of every job (``GET /v1/stream``) and
show the jobs seen moving in a live table, updated in place (rich.live): id, kind, state,
runs, age and the last thing that happened. ``--json`` prints each event as one JSON line
instead (the API's StreamEventPublic), for ``jq`` or a program.

The stream is the Python client's (``Client.stream_all``): a dropped connection is resumed
with ``Last-Event-ID``, nothing repeated or skipped; behind an API that cannot stream (API
Gateway and Lambda) it follows by long poll. Ctrl-C ends it, exit 0.

What the table knows is what the stream said since the command started: a job first seen
at its submission has its exact age and runs; one first seen later shows its age as at
least the time since then (``≥``) and the runs seen since (``+``)."""

from __future__ import annotations

import datetime as dt
import json
import os
import sys
import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.console import Console, ConsoleOptions, RenderResult
from rich.live import Live
from rich.markup import escape
from rich.table import Column
from rich.text import Text

from app.cli import remote, render, render_json
from app.cli.render import PlainTable, err, out
from app.states import JobState

if TYPE_CHECKING:
    from app import client

HEADERS = ("id", "tenant", "kind", "state", "runs", "age")
# What a row's "last" column shows of an output or a published value, at most.
DETAIL_CHARS = 60


@dataclass
class Row:
    """A job as the stream has shown it so far."""

    job_id: str
    kind: str
    tenant: str
    state: str = ""
    runs: int = 0
    first_at: dt.datetime | None = None
    seen_from_start: bool = False  # its first event seen was its submission
    last: str = ""


def detail(event: client.StreamEvent) -> str:
    """The last thing that happened to a job, in a few words."""
    data: Any = event.data if isinstance(event.data, dict) else {}
    if event.type == "transition":
        moved = f"{data.get('from_state') or 'new'} → {data.get('to_state')}"
        return f"{moved}: {data['detail']}" if data.get("detail") else moved
    if event.type == "progress":
        fraction = data.get("fraction")
        pct = f"{float(fraction) * 100:.0f}%" if isinstance(fraction, int | float) else "?"
        return f"progress {pct} {data.get('note') or ''}".rstrip()
    if event.type == "output":
        return "output " + json.dumps(event.data, ensure_ascii=False)
    if event.type == "state":
        return f"state {data.get('key')} = {json.dumps(data.get('value'), ensure_ascii=False)}"
    return "writing a model's answer"  # a chunk of it


def age(seconds: float) -> str:
    whole = max(0, int(seconds))
    hours, rest = divmod(whole, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours}h{minutes:02d}m"
    return f"{minutes}m{secs:02d}s" if minutes else f"{secs}s"


class Board:
    """The jobs seen moving, the latest move first, at most ``rows`` of them. Rich renders
    it at each refresh (a thread of its own), so ages keep counting between events; the
    lock keeps a refresh from reading a row half written."""

    def __init__(self, title: str, rows: int) -> None:
        self.title = title
        self.limit = rows
        self.rows: dict[str, Row] = {}
        self.events = 0
        self.lock = threading.Lock()

    def see(self, event: client.StreamEvent) -> None:
        key = str(event.job_id)
        with self.lock:
            self.events += 1
            row = self.rows.pop(key, None) or Row(key, event.kind, event.tenant)
            self.rows[key] = row  # last: the latest move
            data: Any = event.data if isinstance(event.data, dict) else {}
            if row.first_at is None:
                row.first_at = event.at
                row.seen_from_start = event.type == "transition" and not data.get("from_state")
            if event.type == "transition":
                row.state = str(data.get("to_state") or row.state)
                if row.state == JobState.RUNNING:
                    row.runs += 1
            row.last = detail(event)
            while len(self.rows) > self.limit:
                del self.rows[next(iter(self.rows))]

    def table(self, now: dt.datetime) -> PlainTable:
        with self.lock:
            rows = list(reversed(self.rows.values()))
            events = self.events
        # One line a job: every column as wide as its values, the last event in what is
        # left of the terminal's width, cut with an ellipsis.
        table = PlainTable(
            *(Column(header=Text(h), no_wrap=True) for h in HEADERS),
            Column(header=Text("last"), overflow="ellipsis", no_wrap=True, ratio=1),
            title=f"{self.title}: {len(rows)} jobs, {events} events (Ctrl-C to stop)",
            expand=True,
        )
        for r in rows:
            since = age((now - r.first_at).total_seconds()) if r.first_at else ""
            table.add_row(
                r.job_id,
                r.tenant,
                r.kind,
                render.state(r.state) if r.state else Text(""),
                str(r.runs) if r.seen_from_start else f"+{r.runs}",
                since if r.seen_from_start else f"≥{since}",
                render.short(r.last, DETAIL_CHARS),
            )
        return table

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        yield self.table(dt.datetime.now(dt.UTC))


def wanted(event: client.StreamEvent, kind: str | None, state: JobState | None) -> bool:
    """Whether the filters let the event through: ``kind``, the job's kind; ``state``,
    only transitions into that state."""
    if kind is not None and event.kind != kind:
        return False
    if state is None:
        return True
    data: Any = event.data if isinstance(event.data, dict) else {}
    return event.type == "transition" and data.get("to_state") == state.value


def watch(
    kind: Annotated[str | None, typer.Option(help="only jobs of this kind")] = None,
    state: Annotated[JobState | None, typer.Option(help="only transitions into this state")] = None,
    tenant: Annotated[
        str | None, typer.Option(help="only this tenant's jobs (an admin key's choice)")
    ] = None,
    rows: Annotated[int, typer.Option(min=1, max=1000, help="show this many jobs at most")] = 30,
    as_json: Annotated[
        bool, typer.Option("--json", help="one JSON line per event (the API's), no table")
    ] = False,
    api_url: remote.ApiUrl = None,
    api_key: remote.ApiKey = None,
) -> None:
    """Follow the jobs as they move (GET /v1/stream) in a live table: id, tenant, kind,
    state, runs, age and the last event, latest first. With --json: one JSON line per
    event instead. Ctrl-C stops it (exit 0). A tenant key sees its tenant's jobs; an
    admin key every tenant's, or --tenant's."""
    from app.client import ConnectionLost, TaskleaseError

    url, key = remote.connection_or_exit(api_url, api_key, "tasklease jobs watch follows the API")
    try:
        if as_json:
            _lines(url, key, kind, state, tenant)
        else:
            _live(url, key, kind, state, tenant, rows)
    except KeyboardInterrupt:
        return
    except BrokenPipeError:
        # The reader of --json's lines is gone (`| head -5`): done, without the
        # interpreter's complaint about flushing stdout at exit.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return
    except ConnectionLost as exc:
        err.print(f"[red]the stream is lost:[/] {escape(str(exc))}")
        raise typer.Exit(1) from exc
    except TaskleaseError as exc:
        err.print(f"[red]the API refused:[/] {escape(str(exc))}")
        raise typer.Exit(1) from exc


def _lines(
    url: str, key: str, kind: str | None, state: JobState | None, tenant: str | None
) -> None:
    from app.client import Client

    with Client(url, key) as api:
        for event in api.stream_all(tenant=tenant):
            if wanted(event, kind, state):
                render_json.emit_line(event)


def _live(
    url: str, key: str, kind: str | None, state: JobState | None, tenant: str | None, rows: int
) -> None:
    from app.client import Client

    board = Board(f"jobs moving at {url}", rows)
    # Redrawn 4 times a second (ages keep counting), not at each event: a burst of events
    # costs no redraw of its own.
    live = Live(board, console=out, refresh_per_second=4)
    with Client(url, key) as api:
        live.start()
        try:
            for event in api.stream_all(tenant=tenant):
                if wanted(event, kind, state):
                    board.see(event)
        except Exception:
            live.transient = True  # an error ends it: its message, not the table, is left
            raise
        finally:
            live.stop()  # Ctrl-C: the table stays as it was last drawn
