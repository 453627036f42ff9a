"""`tasklease submit --wait`: submit through the HTTP API with the Python client
(app/client) and follow the job until it is finished, printing its progress on stderr
and its result on stdout. The exit code says how it ended: 0 succeeded, 1 any other end
(dead_lettered, cancelled, an API error, the wait's timeout), 2 a missing setting."""

from __future__ import annotations

import datetime as dt
import json
import os
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Annotated, Any, TypeVar

import typer
from rich.markup import escape
from rich.text import Text

from app.cli import render
from app.cli.render import err
from app.tools.stack import state

if TYPE_CHECKING:
    from app import client

API_URL = "TASKLEASE_API_URL"
API_KEY = "TASKLEASE_API_KEY"
T = TypeVar("T")

# The options of a command that asks the API (with connection_or_exit).
ApiUrl = Annotated[str | None, typer.Option(help=f"the API's URL (default ${API_URL})")]
ApiKey = Annotated[str | None, typer.Option(help=f"an API key (default ${API_KEY})")]


def connection_or_exit(
    api_url: str | None, api_key: str | None, why: str = "--wait submits through the API"
) -> tuple[str, str]:
    """The API's URL and key: the options, else the environment, else a running
    ``make run``'s (``.tasklease/dev.json``); exit 2 naming what is missing."""
    note = state.apply(os.environ)
    if note and not (api_url and api_key):
        sys.stderr.write(note + "\n")
    url = api_url or os.environ.get(API_URL)
    key = api_key or os.environ.get(API_KEY)
    if url and key:
        return url, key
    missing = [
        f"{name} (or {option})"
        for name, option, value in ((API_URL, "--api-url", url), (API_KEY, "--api-key", key))
        if not value
    ]
    err.print(f"[red]{escape(why)}: set {' and '.join(missing)}[/]")
    raise typer.Exit(2)


def ask(
    api_url: str | None, api_key: str | None, why: str, call: Callable[[client.Client], T]
) -> tuple[str, T]:
    """One read of the API for a command (``tasklease kinds``, ``tasklease workers``): the
    URL asked and ``call``'s answer; an API that refuses, or cannot be reached, ends the
    command with its reason (exit 1), never a traceback."""
    from app.client import APIError, Client, TaskleaseError

    url, key = connection_or_exit(api_url, api_key, why)
    try:
        with Client(url, key) as tl:
            return url, call(tl)
    except APIError as exc:
        err.print(f"[red]the API refused: {escape(str(exc))}[/]")
        raise typer.Exit(1) from exc
    except TaskleaseError as exc:  # not reached, or no answer in time
        err.print(f"[red]{escape(str(exc))}[/]")
        raise typer.Exit(1) from exc


class Progress:
    """The job's stream on stderr: a line per transition, progress or output; a model's
    streamed answer as running text (its chunks joined), ended before the next line."""

    def __init__(self) -> None:
        self.in_text = False

    def line(self, text: Text) -> None:
        if self.in_text:
            err.print()
            self.in_text = False
        err.print(text)

    def __call__(self, event: client.StreamEvent) -> None:
        data: Any = event.data if isinstance(event.data, dict) else {}
        head = Text(f"attempt {event.attempt} ", style="dim")
        if event.type == "transition":
            line = Text.assemble(head, data.get("from_state") or "new", " → ")
            line.append_text(render.state(str(data.get("to_state"))))
            if data.get("detail"):
                line.append(f"  {data['detail']}", style="dim")
            self.line(line)
        elif event.type == "progress":
            fraction = data.get("fraction")
            pct = f"{float(fraction) * 100:5.1f}%" if isinstance(fraction, int | float) else "?"
            self.line(Text.assemble(head, f"progress {pct} ", str(data.get("note") or "")))
        elif event.type == "output":
            self.line(Text.assemble(head, "output ", json.dumps(event.data)))
        elif event.type == "state":
            shown = f"{data.get('key')} = {json.dumps(data.get('value'))} (v{data.get('version')})"
            self.line(Text.assemble(head, "state ", shown))
        else:  # a chunk of a model's answer, as it is written
            err.print(Text(str(data.get("text", ""))), end="")
            self.in_text = True


def submit_and_wait(
    url: str,
    key: str,
    *,
    kind: str,
    payload: dict[str, Any],
    idempotency_key: str | None,
    max_attempts: int | None,
    timeout_seconds: int | None,
    run_at: dt.datetime | None,
    delay: float | None,
    wait_timeout: float,
    priority: str | None = None,
    deadline: dt.datetime | None = None,
    deadline_seconds: float | None = None,
) -> None:
    from app import client  # httpx: only --wait pays for its import

    try:
        with client.Client(url, key) as api:
            job = api.submit(
                kind,
                payload,
                idempotency_key=idempotency_key,
                max_attempts=max_attempts,
                timeout_seconds=timeout_seconds,
                run_at=run_at,
                delay_seconds=delay,
                priority=priority,
                deadline=deadline,
                deadline_seconds=deadline_seconds,
            )
            err.print(f"job {job.id} submitted; waiting (up to {wait_timeout:g} s)")
            done = api.wait(job.id, timeout=wait_timeout, on_event=Progress())
    except client.TaskleaseError as exc:
        err.print(f"[red]error:[/] {escape(str(exc))}")
        raise typer.Exit(1) from exc
    if done.state == client.JobState.SUCCEEDED:
        render.plain(json.dumps(done.result))
        return
    line = Text.assemble(f"job {done.id} ended ", render.state(done.state.value))
    if done.last_error:
        line.append(f": {done.last_error}")
    err.print(line)
    raise typer.Exit(1)
