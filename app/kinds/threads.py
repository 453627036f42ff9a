"""Calling a kind's function whether it is ``async def`` or plain, without blocking the
event loop (issue 30, item 1).

``ctx.effect``, ``ctx.model_call``, ``ctx.generate`` and ``wait_for_callback``'s
``notify`` take either. An ``async def`` function is awaited on the loop. Any other
function runs in a worker thread (``asyncio.to_thread``: the job's context variables go
with it), so a blocking call holds no other job up; if it returns an awaitable (``lambda:
extract(text)`` with ``extract`` an ``async def``), that is awaited on the loop.

A misuse is a PermanentError, never a retry that runs a side effect again: something that
is not a function (a coroutine: ``extract(text)`` where ``lambda: extract(text)`` was
meant) is refused before anything runs, and a plain function that needs the running
loop (``lambda: asyncio.gather(...)``) is told to be an ``async def``.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Iterator
from typing import Any, TypeVar, cast

from app import errors

T = TypeVar("T")

# What a RuntimeError says when code asked for the event loop in a thread that has none.
_NO_LOOP = ("no current event loop", "no running event loop")
_END = object()


def _refuse_non_callable(what: str, fn: object) -> None:
    if not callable(fn):
        hint = " (pass the function, or a lambda that calls it, not its call)"
        raise errors.PermanentError(
            f"{what}: fn must be a function, not {type(fn).__name__}"
            + (hint if inspect.isawaitable(fn) else "")
        )


def _discard(done: asyncio.Future[Any]) -> None:
    """What a thread returned after its caller was cancelled: an awaitable it made (the
    coroutine of ``lambda: extract(text)``) is closed, never awaited, so it neither runs
    nor warns "coroutine ... was never awaited"; an error is taken, so none is logged."""
    if done.cancelled() or done.exception() is not None:
        return
    result = done.result()
    if inspect.iscoroutine(result):
        result.close()


async def _in_thread(what: str, fn: Callable[[], T]) -> T:
    """``fn()`` in a worker thread; a call that wanted the loop is a PermanentError.

    A cancel (the job's cancel, its timeout, the worker stopping) cannot stop the thread:
    the caller stops waiting, and what the thread returns later is discarded."""
    running: asyncio.Future[T] = asyncio.ensure_future(asyncio.to_thread(fn))
    try:
        return await asyncio.shield(running)
    except asyncio.CancelledError:
        running.add_done_callback(_discard)
        raise
    except RuntimeError as exc:
        if not any(s in str(exc) for s in _NO_LOOP):
            raise
        raise errors.PermanentError(
            f"{what}: fn needs the event loop ({exc}), but a function that is not "
            "`async def` runs in a worker thread: make it an `async def`"
        ) from exc


async def call(what: str, fn: Callable[[], Awaitable[T]] | Callable[[], T]) -> T:
    """``fn()``'s result: awaited if ``fn`` is ``async def``; otherwise ``fn`` runs in a
    worker thread, and an awaitable it returns is awaited here. ``what`` names the
    call in errors ("effect 'write'")."""
    _refuse_non_callable(what, fn)
    if inspect.iscoroutinefunction(fn):
        return await cast(Callable[[], Awaitable[T]], fn)()
    result = await _in_thread(what, fn)
    if inspect.isawaitable(result):
        return await cast(Awaitable[T], result)
    return cast(T, result)


async def iterate(what: str, produce: Callable[[], Any]) -> AsyncIterator[Any]:
    """The items of what ``produce()`` returns: an async iterable (an ``async def``
    generator) is read on the loop; a plain iterable (a generator) is read in a worker
    thread, an item at a time. Text or anything else is a PermanentError."""
    _refuse_non_callable(what, produce)
    if inspect.isasyncgenfunction(produce):
        source = produce()
    else:
        source = await call(what, produce)
    if hasattr(source, "__aiter__"):
        async for item in source:
            yield item
        return
    if isinstance(source, str | bytes) or not isinstance(source, Iterable):
        raise errors.PermanentError(
            f"{what}: produce returned {type(source).__name__}, not its pieces "
            "(an async or plain generator of str, then a Usage)"
        )
    items: Iterator[Any] = iter(source)
    while (item := await _in_thread(what, lambda: next(items, _END))) is not _END:
        yield item
