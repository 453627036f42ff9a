"""Natural batching: a lone caller waits for nothing; concurrent callers share one flush."""

from __future__ import annotations

import asyncio

import pytest

from app.batching import Batcher

pytestmark = pytest.mark.unit


class Recorder:
    def __init__(self, delay: float = 0.0, fail: Exception | None = None) -> None:
        self.batches: list[list[int]] = []
        self.delay = delay
        self.fail = fail

    async def flush(self, items: list[int]) -> list[int]:
        self.batches.append(list(items))
        await asyncio.sleep(self.delay)
        if self.fail is not None:
            raise self.fail
        return [i * 10 for i in items]


@pytest.mark.asyncio
async def test_a_lone_caller_is_flushed_alone_and_gets_its_own_result() -> None:
    rec = Recorder()
    assert await Batcher(rec.flush, max_size=10).submit(7) == 70
    assert rec.batches == [[7]]


@pytest.mark.asyncio
async def test_callers_of_the_same_moment_share_one_flush_and_each_gets_its_result() -> None:
    rec = Recorder()
    b = Batcher(rec.flush, max_size=10)
    assert await asyncio.gather(*(b.submit(i) for i in range(6))) == [0, 10, 20, 30, 40, 50]
    assert rec.batches == [[0, 1, 2, 3, 4, 5]]


@pytest.mark.asyncio
async def test_batches_never_exceed_max_size() -> None:
    rec = Recorder()
    b = Batcher(rec.flush, max_size=4)
    assert await asyncio.gather(*(b.submit(i) for i in range(10))) == [i * 10 for i in range(10)]
    assert [len(b) for b in rec.batches] == [4, 4, 2]


@pytest.mark.asyncio
async def test_callers_arriving_during_a_flush_go_together_into_the_next() -> None:
    rec = Recorder(delay=0.05)

    b = Batcher(rec.flush, max_size=10)
    first = asyncio.ensure_future(b.submit(1))
    await asyncio.sleep(0.01)  # the first flush is under way
    later = [asyncio.ensure_future(b.submit(i)) for i in (2, 3, 4)]
    await asyncio.gather(first, *later)
    assert rec.batches == [[1], [2, 3, 4]]


@pytest.mark.asyncio
async def test_a_failed_flush_fails_every_caller_in_it_and_the_next_batch_still_runs() -> None:
    rec = Recorder(fail=RuntimeError("database down"))

    b = Batcher(rec.flush, max_size=10)
    failed = await asyncio.gather(*(b.submit(i) for i in range(3)), return_exceptions=True)
    rec.fail = None
    outcome = [*failed, await b.submit(9)]
    assert [str(o) for o in outcome[:3]] == ["database down"] * 3
    assert outcome[3] == 90


@pytest.mark.asyncio
async def test_a_flush_that_returns_the_wrong_number_of_results_is_an_error_not_a_mixup() -> None:
    async def short(items: list[int]) -> list[int]:
        return items[:-1]

    b = Batcher(short, max_size=10)
    with pytest.raises(RuntimeError, match="2 items"):
        await asyncio.gather(b.submit(1), b.submit(2))


def test_max_size_and_in_flight_must_be_positive() -> None:
    with pytest.raises(ValueError, match="at least 1"):
        Batcher(Recorder().flush, max_size=0)
