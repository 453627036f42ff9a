"""The one way a command runs its async part: settings read or a clean exit, uvloop's loop,
the database and the queue opened for the command and closed after it, and errors turned
into messages and exit codes (2: configuration, 1: any other tasklease error)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Iterator
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

import typer
from rich.markup import escape

from app import errors, logs, store, transport
from app.cli.render import err
from app.settings import config
from app.tools.stack import state
from app.transport import Transport, secrets

if TYPE_CHECKING:
    from app.worker.engine import Engine

T = TypeVar("T")
R = TypeVar("R")


@contextlib.contextmanager
def errors_exit() -> Iterator[None]:
    """A tasklease error ends the command with its message, not a traceback."""
    try:
        yield
    except errors.ConfigError as exc:
        err.print(f"[red]configuration error:[/] {escape(str(exc))}")
        raise typer.Exit(2) from exc
    except errors.TaskleaseError as exc:
        err.print(f"[red]error:[/] {escape(str(exc))}")
        raise typer.Exit(1) from exc


# Whether `tasklease -v` asked for log lines (set by the command line's callback, main.py).
_verbose = False


def verbose(on: bool) -> None:
    """`tasklease -v`: log lines on stderr (at once, then at TASKLEASE_LOG_LEVEL once a
    command reads its settings). Without it an operator command prints none."""
    global _verbose
    _verbose = on
    if on:
        logs.setup()
    else:
        logs.silence()


def settings_or_exit(*needed: str, dev_state: bool = True, serves: bool = False) -> config.Settings:
    """The settings (with the ones named in ``needed`` set), and logging set up from them:
    always for a command that serves (``serves``: api, worker, sweep, dev), otherwise only
    with -v (an operator's command prints what it did, not log lines).
    With no connection variable set, a running ``make run``'s settings from its state file
    (``.tasklease/dev.json``) are used, and the command says so on stderr. Commands that
    deploy or serve (api, worker, sweep, migrate, queues create) pass ``dev_state=False``:
    they never join a running stack by accident."""
    if dev_state:
        note = state.apply(os.environ)
        if note:
            sys.stderr.write(note + "\n")  # one plain line, never wrapped
    with errors_exit():
        s = config.load()
        s.need(*needed)
    if serves or _verbose:
        logs.setup(s.log_level)
    return s


def _loop_factory() -> Callable[[], asyncio.AbstractEventLoop] | None:
    """uvloop's event loop where it is installed (not on Windows): the worker and the
    sweeper spend their CPU in the loop. uvicorn picks it (and httptools) by itself."""
    try:
        import uvloop
    except ImportError:  # pragma: no cover - a platform without it
        return None
    return uvloop.new_event_loop


def run(work: Callable[[], Coroutine[Any, Any, T]]) -> T:
    """Await ``work()`` on a fresh loop. A callable rather than a coroutine, so that nothing
    of the command's async part (settings properties included) runs outside errors_exit."""
    with errors_exit(), asyncio.Runner(loop_factory=_loop_factory()) as runner:
        return runner.run(work())


@dataclass(frozen=True)
class Clients:
    database: store.Database
    queue: Transport


def database(s: config.Settings) -> AbstractAsyncContextManager[store.Database]:
    """A small pool, open for one command."""
    s.need("database_url")
    return store.connect(secrets.database_url(s), min_size=1, max_size=4)


def queue(s: config.Settings) -> AbstractAsyncContextManager[Transport]:
    """The SQS client, open for one command (queue URLs are not needed to create queues)."""
    return transport.connect(s)


@contextlib.asynccontextmanager
async def clients(s: config.Settings) -> AsyncIterator[Clients]:
    """The database and the queue, open for one command."""
    s.need("database_url", "queue_url", "dlq_url")
    async with database(s) as pool, queue(s) as client:
        yield Clients(pool, client)


@contextlib.asynccontextmanager
async def engine(s: config.Settings) -> AsyncIterator[Engine]:
    """The worker's engine with its own pool and queue, closed when the worker stops."""
    from app.worker.engine import Engine

    started = await Engine.start(s)
    try:
        yield started
    finally:
        await started.close()


async def _within(resource: AbstractAsyncContextManager[R], work: Callable[[R], Awaitable[T]]) -> T:
    async with resource as opened:
        return await work(opened)


def on_database(s: config.Settings, work: Callable[[store.Database], Awaitable[T]]) -> T:
    """Run ``work`` with the database open for it."""
    return run(lambda: _within(database(s), work))


def on_queue(s: config.Settings, work: Callable[[Transport], Awaitable[T]]) -> T:
    """Run ``work`` with the queue client open for it."""
    return run(lambda: _within(queue(s), work))


def on_clients(s: config.Settings, work: Callable[[Clients], Awaitable[T]]) -> T:
    """Run ``work`` with the database and the queue open for it."""
    return run(lambda: _within(clients(s), work))
