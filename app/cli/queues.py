"""Set-up commands: `tasklease migrate` and `tasklease queues create`."""

from __future__ import annotations

import shlex
from typing import Annotated

import typer
from rich.markup import escape

from app.cli import render, runner
from app.cli.render import out
from app.store import pool
from app.transport import secrets

group = typer.Typer(help="Create the queues.", no_args_is_help=True)


def migrate() -> None:
    """Apply the database migrations (forward-only, safe to run concurrently)."""
    s = runner.settings_or_exit("database_url", dev_state=False)
    applied = runner.run(lambda: pool.migrate(secrets.database_url(s)))
    done = ", ".join(applied) if applied else "none (up to date)"
    out.print(f"migrations applied: {escape(done)}")


@group.command("create")
def create(
    name: Annotated[
        str | None, typer.Option(help="queue name; default TASKLEASE_QUEUE_NAME")
    ] = None,
) -> None:
    """Create the three source queues (NAME, NAME-high, NAME-low) and their DLQs (each
    -dlq) with the redrive policies; print their URLs."""
    s = runner.settings_or_exit(dev_state=False)
    urls = runner.on_queue(s, lambda queue: queue.create_queues(name or s.queue_name))
    # For `eval "$(tasklease queues create)"`: plain lines, whatever the terminal or pipe.
    render.plain(*(f"export {k}={shlex.quote(v)}" for k, v in urls.env().items()))
