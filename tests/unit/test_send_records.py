"""A long-running API's deferred outbox marks (services/outbox.py, SendRecords): the sent
rows of a linger marked in one statement, at once past MAX_PENDING, and nothing pending
lost when the API stops, not even a mark under way."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from app import errors
from app.services import outbox

pytestmark = pytest.mark.unit


class Marks:
    """store.outbox.record_sends, as the statements it would run (each taking a while)."""

    def __init__(self, fail: bool = False) -> None:
        self.calls: list[list[int]] = []
        self.fail = fail

    async def __call__(self, db: Any, *, sent: list[int], failed: list[int], error: str) -> None:
        await asyncio.sleep(0.05)
        if self.fail:
            raise errors.StoreError("the database went away")
        self.calls.append(list(sent))


async def marked(marks: Marks, within: float = 10) -> list[list[int]]:
    """The marks once one was made (a loaded machine may stall the loop a while)."""
    deadline = asyncio.get_running_loop().time() + within
    while not marks.calls and asyncio.get_running_loop().time() < deadline:
        await asyncio.sleep(0.01)
    return marks.calls


@pytest.fixture
def marks(monkeypatch: pytest.MonkeyPatch) -> Marks:
    found = Marks()
    monkeypatch.setattr(outbox.store.outbox, "record_sends", found)
    return found


@pytest.mark.asyncio
async def test_the_rows_sent_within_a_linger_are_marked_in_one_statement(marks: Marks) -> None:
    records = outbox.SendRecords(db=None)  # type: ignore[arg-type]
    records.add([1, 2])
    records.add([3])
    await asyncio.sleep(0.01)
    records.add([4])
    assert marks.calls == []  # not before the linger
    assert await marked(marks) == [[1, 2, 3, 4]]


@pytest.mark.asyncio
async def test_past_max_pending_the_rows_are_marked_at_once(
    marks: Marks, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(outbox.SendRecords, "LINGER_SECONDS", 600)
    records = outbox.SendRecords(db=None)  # type: ignore[arg-type]
    records.add(list(range(outbox.SendRecords.MAX_PENDING)))
    assert [len(c) for c in await marked(marks)] == [outbox.SendRecords.MAX_PENDING]


@pytest.mark.asyncio
async def test_reaching_max_pending_during_a_linger_marks_at_once(
    marks: Marks, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(outbox.SendRecords, "LINGER_SECONDS", 600)
    records = outbox.SendRecords(db=None)  # type: ignore[arg-type]
    records.add([-1])
    await asyncio.sleep(0.05)  # the mark of [-1] waits out its linger
    records.add(list(range(outbox.SendRecords.MAX_PENDING)))
    assert [len(c) for c in await marked(marks)] == [outbox.SendRecords.MAX_PENDING + 1]


@pytest.mark.asyncio
async def test_stopping_marks_what_is_pending_and_finishes_a_mark_under_way(
    marks: Marks,
) -> None:
    records = outbox.SendRecords(db=None)  # type: ignore[arg-type]
    records.add([1])
    await asyncio.sleep(outbox.SendRecords.LINGER_SECONDS + 0.02)  # the mark of [1] under way
    records.add([2])
    await records.close()
    assert sorted(i for call in marks.calls for i in call) == [1, 2]


@pytest.mark.asyncio
async def test_a_mark_that_fails_is_left_to_the_relay_and_the_next_rows_still_marked(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    failing = Marks(fail=True)
    monkeypatch.setattr(outbox.store.outbox, "record_sends", failing)
    records = outbox.SendRecords(db=None)  # type: ignore[arg-type]
    records.add([1])
    deadline = asyncio.get_running_loop().time() + 10
    while "the relay sends them again" not in caplog.text:
        assert asyncio.get_running_loop().time() < deadline, "the failed mark was not logged"
        await asyncio.sleep(0.01)
    working = Marks()
    monkeypatch.setattr(outbox.store.outbox, "record_sends", working)
    records.add([2])
    await records.close()
    assert working.calls == [[2]]
