"""Natural batching: what concurrent callers ask for at the same moment, done in one call.

A caller that finds no flush under way starts one at once, so a lone request waits for
nothing; callers that arrive while a flush is under way are gathered into the next
one (up to ``max_size``). Under load the batches fill by themselves, with no timer
and no added latency. The API gathers its post-commit sends into SendMessageBatch
this way, and the engine its claims, starts and completions into one statement each.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from typing import Generic, TypeVar

T = TypeVar("T")
R = TypeVar("R")

Flush = Callable[[list[T]], Awaitable[Sequence[R]]]


class Batcher(Generic[T, R]):
    def __init__(self, flush: Flush[T, R], *, max_size: int, max_in_flight: int = 1) -> None:
        if max_size < 1 or max_in_flight < 1:
            raise ValueError("max_size and max_in_flight must be at least 1")
        self._flush = flush
        self.max_size = max_size
        self.max_in_flight = max_in_flight
        self._pending: list[tuple[T, asyncio.Future[R]]] = []
        self._running = 0
        self._tasks: set[asyncio.Task[None]] = set()

    async def submit(self, item: T) -> R:
        """The result for ``item``, once the flush that took it returns (or its error)."""
        future: asyncio.Future[R] = asyncio.get_running_loop().create_future()
        self._pending.append((item, future))
        self._kick()
        return await future

    def _kick(self) -> None:
        while self._pending and self._running < self.max_in_flight:
            self._running += 1
            # The task takes its batch when it runs, not now: the callers scheduled in the
            # same turn of the event loop (a Lambda batch's records) all get in.
            task = asyncio.get_running_loop().create_task(self._drain())
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _drain(self) -> None:
        try:
            while self._pending:
                batch, self._pending = (
                    self._pending[: self.max_size],
                    self._pending[self.max_size :],
                )
                await self._run(batch)
        finally:
            self._running -= 1

    async def _run(self, batch: list[tuple[T, asyncio.Future[R]]]) -> None:
        try:
            results = await self._flush([item for item, _ in batch])
            if len(results) != len(batch):
                raise RuntimeError(f"flush returned {len(results)} results for {len(batch)} items")
        except Exception as exc:
            for _, future in batch:
                if not future.done():
                    future.set_exception(exc)
            return
        except BaseException:
            # Cancelled (the loop is closing): the callers must not wait forever.
            for _, future in batch:
                if not future.done():
                    future.cancel()
            raise
        for (_, future), result in zip(batch, results, strict=True):
            if not future.done():
                future.set_result(result)
