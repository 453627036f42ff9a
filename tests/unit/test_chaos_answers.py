"""The chaos harness's answers to approvals against a slow system (issue 30, item 16).

The gate failed on some seeds with "the harness could not answer its callback: gave up":
the harness gave each approval 90 s from its acknowledgement, but one submitted late in
the burst waits behind the whole backlog before its first run opens the callback, longer
than that on a loaded machine. It must keep answering while the run is live (until the
drain has ended), and a second answer it never sent is no finding.

The slow system runs on a virtual clock: an event loop whose idle waits advance the
clock instead of sleeping (and ``time.monotonic`` reads the same clock), so minutes of
backlog pass in milliseconds of the test."""

from __future__ import annotations

import asyncio
import selectors
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

import httpx
import pytest

from app import store
from app.services import callbacks
from app.tools.chaos import answers
from app.tools.chaos.checker import check
from app.tools.chaos.config import Run
from app.tools.chaos.run import finish_answering
from app.tools.chaos.workload import Item
from tests.unit.test_chaos_checker import facts

pytestmark = pytest.mark.unit

JOB = uuid.UUID(int=7)


class _Selector(selectors.DefaultSelector):
    def __init__(self, clock: list[float]) -> None:
        super().__init__()
        self.clock = clock

    def select(self, timeout: float | None = None) -> list[Any]:
        ready = super().select(0 if timeout is not None else None)
        if not ready and timeout:
            self.clock[0] += timeout  # nothing to do until then: skip ahead
        return ready


def run_virtually(main: Callable[[], Awaitable[Any]], monkeypatch: pytest.MonkeyPatch) -> Any:
    """``main()`` on a loop whose clock is virtual and jumps to the next timer when idle."""
    clock = [1000.0]
    loop = asyncio.SelectorEventLoop(_Selector(clock))
    monkeypatch.setattr(loop, "time", lambda: clock[0])
    monkeypatch.setattr(time, "monotonic", lambda: clock[0])
    try:
        return loop.run_until_complete(main())
    finally:
        loop.close()


class SlowSystem:
    """The callback opens ``opens`` s into the run (the backlog ahead of the job's first
    run); the API answers 503 until ``api_back`` s (a restart), then accepts the first
    answer and refuses the rest as the route does (409)."""

    def __init__(self, opens: float, api_back: float = 0.0) -> None:
        self.t0 = time.monotonic()
        self.opens, self.api_back = opens, api_back
        self.answered = 0
        self.posts = 0

    def now(self) -> float:
        return time.monotonic() - self.t0

    async def callback_of(self, database: object, job_id: uuid.UUID, key: str) -> object:
        return object() if self.now() >= self.opens else None

    async def token_for(self, database: object, job_id: uuid.UUID, key: str) -> str:
        return "tlcb_token"

    def api(self, request: httpx.Request) -> httpx.Response:
        self.posts += 1
        if self.now() < self.api_back:
            return httpx.Response(503)
        self.answered += 1
        return httpx.Response(200 if self.answered == 1 else 409)


def answering(
    monkeypatch: pytest.MonkeyPatch, plan: str, opens: float, api_back: float = 0.0
) -> Callable[[asyncio.Event], Awaitable[tuple[SlowSystem, dict[str, Any]]]]:
    async def go(over: asyncio.Event) -> tuple[SlowSystem, dict[str, Any]]:
        system = SlowSystem(opens, api_back)
        monkeypatch.setattr(store.waits, "callback_of", system.callback_of)
        monkeypatch.setattr(callbacks, "token_for", system.token_for)
        run = Run()
        run.acked["W-1"] = str(JOB)
        item = Item("W-1", "demo.approval", {}, plan)
        transport = httpx.MockTransport(system.api)
        async with httpx.AsyncClient(base_url="http://api", transport=transport) as api:
            await answers.answer_one(run, object(), api, item, 1.0, 0.5, over)  # type: ignore[arg-type]
        return system, run.answers["W-1"]

    return go


def test_an_approval_behind_a_long_backlog_is_answered_once_its_callback_opens(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Its first run opens the callback 200 s in (the 90 s the harness used to allow from
    # the acknowledgement long past), then the API is down for a minute more.
    async def main() -> tuple[SlowSystem, dict[str, Any]]:
        return await answering(monkeypatch, "answer twice", opens=200, api_back=260)(
            asyncio.Event()
        )

    system, record = run_virtually(main, monkeypatch)
    assert (record["first"], record["second"]) == ("answered", "conflict"), record
    assert record["opened"] - record["since"] >= 200
    assert record["answered"] - record["since"] >= 260
    assert system.answered == 2


def test_the_harness_gives_up_only_when_the_run_is_over_and_then_sends_no_second(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    async def main() -> tuple[SlowSystem, dict[str, Any]]:
        over = asyncio.Event()
        asyncio.get_running_loop().call_later(500, over.set)  # the drain ended at 500 s
        return await answering(monkeypatch, "answer twice", opens=10_000)(over)

    system, record = run_virtually(main, monkeypatch)
    assert record["first"] == "gave up"
    assert "run ended" in record["why"]
    assert "second" not in record and system.posts == 0


def test_an_answer_tried_when_the_run_ends_is_tried_once_before_it_is_given_up(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    async def main() -> tuple[SlowSystem, dict[str, Any]]:
        over = asyncio.Event()
        over.set()
        return await answering(monkeypatch, "answer", opens=0)(over)

    system, record = run_virtually(main, monkeypatch)
    assert record["first"] == "answered" and system.posts == 1


def test_after_a_drain_the_answers_left_finish_before_the_harness_stops_them(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    async def main() -> tuple[bool, bool]:
        over = asyncio.Event()
        quick = asyncio.create_task(asyncio.sleep(5))  # a second answer still to send
        await finish_answering(quick, over, drained=True)
        stuck = asyncio.create_task(over.wait())  # an answer that cannot get through
        await finish_answering(stuck, over, drained=True)
        return quick.done() and not quick.cancelled(), over.is_set()

    assert run_virtually(main, monkeypatch) == (True, True)


def test_a_second_answer_the_harness_never_sent_is_no_second_finding() -> None:
    f = facts()
    f["answers"]["W-1"] = {"first": "gave up", "second": "gave up"}
    report = check(**f)
    whys = [u["why"] for u in report["unexpected_jobs"]]
    assert len(whys) == 1, whys
    assert "could not answer its callback: gave up" in whys[0]
    assert "second answer" not in whys[0]
