"""A run's deadline in the in-memory kind runner (app/kinds/memory_deadline.py), as the
engine enforces it: fixed at the first run (deadline, deadline_seconds or the kind's
default), every wait woken at it at the latest, a resume at it ends the job unrun, an
attempt whose clock reaches it is stopped at its next effect; the end is dead-lettered
by 'deadline' with the unfinished children cancelled."""

from __future__ import annotations

import asyncio
import datetime as dt
from typing import Any

import pytest
from pydantic import BaseModel

from app.demos.basic import approval, fanout, nap
from app.demos.chat import chat
from app.kinds import JobContext, kind
from app.kinds.memory_store import EffectStore
from app.kinds.testing import run_kind
from app.store import deadlines as store_deadlines
from tasklease.testing import KindDeadlinePassed
from tests.unit.test_waits_replay import suspended

pytestmark = pytest.mark.unit

START = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)


class Clocked(BaseModel):
    steps: int = 3


def ended(coro: Any) -> KindDeadlinePassed:
    with pytest.raises(KindDeadlinePassed) as end:
        asyncio.run(coro)
    return end.value


def test_a_sleep_past_the_deadline_wakes_at_it_and_the_job_ends_there() -> None:
    payload = {"seconds": 3600}
    waiting = suspended(run_kind(nap, payload, deadline_seconds=60))
    assert waiting.store.deadline == START + dt.timedelta(seconds=60)
    assert (waiting.wait.kind, waiting.wait.wake_at) == ("timer", waiting.store.deadline)

    waiting.store.advance(30)  # woken early: still before the deadline, it waits again
    again = suspended(waiting.resume(nap, payload))
    assert again.wait.wake_at == waiting.store.deadline

    again.store.advance(30)
    end = ended(again.resume(nap, payload))
    assert (end.state, end.dead_lettered_by, end.reason) == (
        "dead_lettered",
        "deadline",
        "deadline passed",
    )
    assert end.unrun and end.at == end.deadline and end.ran == [] and end.replayed == []
    assert end.reason == store_deadlines.REASON  # what the engine writes


def test_a_sleep_within_the_deadline_is_untouched_and_the_run_succeeds() -> None:
    payload = {"seconds": 10}
    waiting = suspended(run_kind(nap, payload, deadline=START + dt.timedelta(hours=1)))
    assert waiting.wait.wake_at == START + dt.timedelta(seconds=10)
    waiting.store.advance(10)
    run = asyncio.run(waiting.resume(nap, payload))
    assert run.result["naps"] == 1


def test_the_kinds_default_deadline_applies_and_a_submitted_one_wins() -> None:
    @kind("test.deadline_default", deadline_seconds=120)
    async def bounded_nap(ctx: JobContext[None], p: Clocked) -> None:
        await ctx.sleep("long", 3600)

    assert suspended(run_kind(bounded_nap, {})).wait.wake_at == START + dt.timedelta(seconds=120)
    short = suspended(run_kind(bounded_nap, {}, deadline_seconds=5))
    assert short.wait.wake_at == START + dt.timedelta(seconds=5)
    assert suspended(run_kind(nap, {"seconds": 3600})).store.deadline is None


def test_a_callback_wait_with_children_ends_at_the_deadline_its_children_cancelled() -> None:
    # issue 32's done-when, in memory: the children wait, so does the parent.
    payload = {"children": 2}
    waiting = suspended(run_kind(fanout, payload, deadline_seconds=5))
    assert (waiting.wait.kind, waiting.wait.wake_at) == (
        "children",
        START + dt.timedelta(seconds=5),
    )
    first, second = waiting.store.children
    waiting.store.finish_child(first, result={"naps": 1})
    waiting.store.advance(5)
    end = ended(waiting.resume(fanout, payload))
    assert end.cancelled_children == [second]
    assert waiting.store.children[second].state == "failed"
    assert waiting.store.children[second].error == "cancelled"
    assert waiting.store.children[first].state == "succeeded"

    callback = suspended(run_kind(approval, {"timeout_seconds": 3600}, deadline_seconds=5))
    assert callback.wait.wake_at == START + dt.timedelta(seconds=5)
    callback.store.advance(5)
    assert ended(callback.resume(approval, {"timeout_seconds": 3600})).unrun


def test_a_receive_without_a_timeout_waits_until_the_deadline_at_most() -> None:
    waiting = suspended(run_kind(chat, {"messages": 1}, deadline_seconds=30))
    assert (waiting.wait.kind, waiting.wait.wake_at) == (
        "message",
        START + dt.timedelta(seconds=30),
    )
    waiting.store.send("user", "in time")  # before the deadline: it is answered
    run = asyncio.run(waiting.resume(chat, {"messages": 1}))
    assert run.result["answers"][0]["reply"] == "you said: in time"


@kind("test.deadline_running")
async def slow_steps(ctx: JobContext[EffectStore], p: Clocked) -> int:
    """Each step takes 10 s of the store's clock; a kind catching Exception cannot keep
    running past the deadline."""
    done = 0
    for i in range(p.steps):

        async def step(i: int = i) -> int:
            ctx.deps.advance(10)
            return i

        try:
            await ctx.effect(f"step-{i}", step)
        except Exception:  # the stop is not an Exception: this cannot swallow it
            return -1
        done += 1
    return done


def test_a_running_attempt_is_stopped_at_its_next_effect_past_the_deadline() -> None:
    store = EffectStore()
    end = ended(run_kind(slow_steps, {}, deps=store, store=store, deadline_seconds=15))
    # step-0 ends at 10 s, step-1 at 20 s: stopped once step-1 is recorded.
    assert end.ran == ["step-0", "step-1"] and not end.unrun
    assert set(store.records) == {"step-0", "step-1"}

    store = EffectStore()
    run = asyncio.run(run_kind(slow_steps, {}, deps=store, store=store, deadline_seconds=31))
    assert run.result == 3


def test_a_submission_checks_its_deadline_as_the_api_does() -> None:
    cases: list[tuple[dict[str, Any], str]] = [
        ({"deadline_seconds": 0}, "more than 0"),
        ({"deadline_seconds": 367 * 86_400}, "at most"),
        ({"deadline": START}, "already past"),
        ({"deadline": dt.datetime(2027, 1, 1)}, "time zone"),
        ({"deadline": START + dt.timedelta(1), "deadline_seconds": 5}, "not both"),
    ]
    for options, says in cases:
        with pytest.raises(ValueError, match=says):
            asyncio.run(run_kind(nap, {"seconds": 1}, **options))
    waiting = suspended(run_kind(nap, {"seconds": 100}, deadline_seconds=50))
    with pytest.raises(ValueError, match="fixed by the first run"):
        asyncio.run(waiting.resume(nap, {"seconds": 100}, deadline_seconds=500))
