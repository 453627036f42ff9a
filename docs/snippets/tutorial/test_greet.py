"""The greet kind's unit tests: in memory, no PostgreSQL, no queue."""

from __future__ import annotations

import asyncio
from pathlib import Path

import greet
import pytest

from tasklease import PermanentError
from tasklease.testing import run_kind


@pytest.fixture(autouse=True)
def outbox(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "greetings.txt"
    monkeypatch.setattr(greet, "OUTBOX", path)
    return path


def test_it_greets_and_delivers_once(outbox: Path) -> None:
    run = asyncio.run(run_kind(greet.greet, {"name": "Ada"}))
    assert run.result.message == "Hello, Ada!"
    assert run.ran == ["compose", "deliver"]
    assert outbox.read_text().splitlines() == [f"{run.result.delivery} Hello, Ada!"]


def test_a_crash_after_the_delivery_is_recorded_does_not_deliver_again(outbox: Path) -> None:
    # The first attempt dies once its second effect is recorded; the next replays both.
    run = asyncio.run(run_kind(greet.greet, {"name": "Ada"}, crash_after_effect=2))
    assert run.crashed_after == "deliver"
    assert run.attempts == 2
    assert run.replayed == ["compose", "deliver"]
    assert len(outbox.read_text().splitlines()) == 1  # delivered once


def test_a_crash_inside_the_delivery_delivers_again_with_the_same_key(outbox: Path) -> None:
    # The one window: the outside call returned, the record was not written yet. The
    # next attempt calls again, with the same idempotency key for the outside system.
    run = asyncio.run(run_kind(greet.greet, {"name": "Ada"}, crash_inside_effect=2))
    lines = outbox.read_text().splitlines()
    assert lines == [f"{run.result.delivery} Hello, Ada!"] * 2


def test_nobody_is_a_permanent_failure() -> None:
    with pytest.raises(PermanentError):
        asyncio.run(run_kind(greet.greet, {"name": "nobody"}))
