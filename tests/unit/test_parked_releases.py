"""fairness.Releases: a lease's end releases its tenant's parked jobs on the record's
path (Lambda) or beside it (a long-running worker), and a worker stopping waits for the
ones beside."""

from __future__ import annotations

import asyncio
import logging

import pytest

from app import errors
from app.worker.fairness import Releases

pytestmark = pytest.mark.unit


class Recorder:
    def __init__(self, gate: asyncio.Event | None = None, fail: Exception | None = None) -> None:
        self.gate = gate
        self.fail = fail
        self.calls: list[list[str]] = []

    async def __call__(self, tenants: list[str]) -> list[None]:
        if self.gate is not None:
            await self.gate.wait()
        if self.fail is not None:
            raise self.fail
        self.calls.append(tenants)
        return [None] * len(tenants)


@pytest.mark.asyncio
async def test_on_the_path_a_release_is_done_when_it_returns() -> None:
    recorder = Recorder()
    releases = Releases(recorder, max_size=50)
    await releases.release("acme")
    assert recorder.calls == [["acme"]]


@pytest.mark.asyncio
async def test_beside_a_release_returns_at_once_and_settle_waits_for_it() -> None:
    gate = asyncio.Event()
    recorder = Recorder(gate)
    releases = Releases(recorder, max_size=50)
    releases.beside = True
    await asyncio.wait_for(releases.release("acme"), timeout=5)
    await asyncio.wait_for(releases.release("beta"), timeout=5)
    assert recorder.calls == [], "the releases wait on their statement, not the caller"
    settled = asyncio.create_task(releases.settle())
    await asyncio.sleep(0.05)
    assert not settled.done(), "stopping waits for the releases under way"
    gate.set()
    await asyncio.wait_for(settled, timeout=5)
    assert sorted(t for call in recorder.calls for t in call) == ["acme", "beta"]


@pytest.mark.asyncio
async def test_a_failed_release_is_left_to_the_sweeper_with_a_log_line(
    caplog: pytest.LogCaptureFixture,
) -> None:
    for fail in (errors.StoreError("database down"), RuntimeError("a bug")):
        caplog.clear()
        releases = Releases(Recorder(fail=fail), max_size=50)
        releases.beside = True
        with caplog.at_level(logging.WARNING, logger="app.worker.fairness"):
            await releases.release("acme")
            await asyncio.wait_for(releases.settle(), timeout=5)
        assert "the sweeper will" in caplog.text, fail


@pytest.mark.asyncio
async def test_on_the_path_an_unexpected_error_reaches_the_record() -> None:
    """Inline, a bug is the record's to report (its message is left), as before."""
    releases = Releases(Recorder(fail=RuntimeError("a bug")), max_size=50)
    with pytest.raises(RuntimeError, match="a bug"):
        await releases.release("acme")
