"""The worker's output buffer: an item emitted while a batch is being written is written
by the next batch, not dropped with the one in flight (the chaos gate found chunks lost
this way: a streamed answer with gaps)."""

from __future__ import annotations

import asyncio
import datetime as dt
import uuid
from typing import Any

import pytest

from app import store
from app.kinds.output import Emitted
from app.worker.output import OutputBuffer

pytestmark = pytest.mark.unit


def test_items_added_while_a_write_is_in_flight_are_written_next(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    written: list[list[int]] = []
    started = asyncio.Event()

    async def slow_append(db: Any, job_id: Any, token: Any, items: list[Any]) -> bool:
        started.set()
        await asyncio.sleep(0.05)  # the statement's round trip
        written.append([i.seq for i in items])
        return True

    monkeypatch.setattr(store.streams, "append", slow_append)

    async def go() -> None:
        buf = OutputBuffer(None, uuid.uuid4(), uuid.uuid4())  # type: ignore[arg-type]
        at = dt.datetime.now(dt.UTC)

        def chunk(seq: int) -> Emitted:
            return Emitted(at, "chunk", {"text": str(seq)}, key="a", seq=seq)

        await buf.add(chunk(0))
        flushing = asyncio.create_task(buf.flush())
        await started.wait()
        await buf.add(chunk(1))  # while seq 0's write is awaited
        await buf.add(chunk(2))
        await flushing
        await buf.close()

    asyncio.run(go())
    assert written == [[0], [1, 2]]
