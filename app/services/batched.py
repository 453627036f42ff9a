"""A prune run in batches: each batch one statement (and so one short transaction)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable


async def prune_in_batches(
    prune_batch: Callable[..., Awaitable[int]],
    *,
    keep_seconds: float,
    size: int,
    max_batches: int | None,
) -> int:
    """``prune_batch(keep_seconds=, limit=size)`` until a batch comes back short or
    ``max_batches`` ran (None: until none is left); answers the rows deleted in all.
    ``keep_seconds`` 0 keeps every row: nothing runs."""
    deleted = batches = 0
    while keep_seconds and (max_batches is None or batches < max_batches):
        n = await prune_batch(keep_seconds=keep_seconds, limit=size)
        deleted += n
        batches += 1
        if n < size:
            break
    return deleted
