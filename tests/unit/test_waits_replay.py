"""The waits through the in-memory kind runner (app/kinds/testing.py): a run ends
suspended and is resumed; replay returns recorded sleeps, callbacks and children
without doing them again; a key used twice in one run is an error; the gather rule."""

from __future__ import annotations

import asyncio
import datetime as dt
import itertools
from typing import Any

import pytest
from pydantic import BaseModel

from app import errors
from app.demos.basic import approval, fanout, nap
from app.kinds import JobContext, kind
from app.kinds.memory_store import EffectStore
from app.kinds.testing import KindSuspended, run_kind
from app.kinds.waits import Rule

pytestmark = pytest.mark.unit


def suspended(coro: Any) -> KindSuspended:
    """Run ``coro`` (a run_kind or a resume) and return how it suspended."""
    with pytest.raises(KindSuspended) as waiting:
        asyncio.run(coro)
    return waiting.value


# --- sleeps -----------------------------------------------------------------------


def test_a_sleep_suspends_until_its_timer_and_replay_does_not_restart_it() -> None:
    payload = {"seconds": 5, "naps": 1}
    first = suspended(run_kind(nap, payload))
    start = first.store.clock
    assert first.wait.kind == "timer" and first.wait.key == "nap-0"
    assert first.wait.wake_at == start + dt.timedelta(seconds=5)
    assert first.ran == ["sleep:nap-0"]

    # Woken early (4 s in): the recorded due time holds; the timer is not started again.
    first.store.advance(4)
    again = suspended(first.resume(nap, payload))
    assert again.wait.wake_at == start + dt.timedelta(seconds=5)
    assert (again.ran, again.replayed) == ([], ["sleep:nap-0"])

    again.store.advance(1)
    run = asyncio.run(again.resume(nap, payload))
    assert run.ran == ["woke-0"] and run.replayed == ["sleep:nap-0"]
    assert run.result["woke_at"] == [(start + dt.timedelta(seconds=5)).isoformat()]


def test_naps_in_a_row_each_wait_once_and_the_woken_steps_are_not_repeated() -> None:
    payload = {"seconds": 10, "naps": 3}
    waiting = suspended(run_kind(nap, payload))
    ran = list(waiting.ran)
    for i in range(1, 3):
        waiting.store.advance(10)
        waiting = suspended(waiting.resume(nap, payload))
        assert waiting.wait.key == f"nap-{i}"
        ran += waiting.ran
    waiting.store.advance(10)
    run = asyncio.run(waiting.resume(nap, payload))
    ran += run.ran
    assert ran == ["sleep:nap-0", "woke-0", "sleep:nap-1", "woke-1", "sleep:nap-2", "woke-2"]
    assert run.replayed == ["sleep:nap-0", "woke-0", "sleep:nap-1", "woke-1", "sleep:nap-2"]
    assert run.attempts == 1  # each resume is a run of the same attempt: waits use none


def test_a_sleep_of_zero_seconds_or_until_the_past_returns_at_once() -> None:
    run = asyncio.run(run_kind(nap, {"seconds": 0}))
    assert run.ran == ["sleep:nap-0", "woke-0"]


# --- callbacks --------------------------------------------------------------------

APPROVAL = {"timeout_seconds": 60}


def test_a_callback_is_notified_once_and_its_answer_is_returned_on_resume() -> None:
    waiting = suspended(run_kind(approval, APPROVAL))
    assert waiting.wait.kind == "callback" and waiting.wait.key == "approve"
    assert waiting.wait.wake_at == waiting.store.clock + dt.timedelta(seconds=60)
    assert waiting.ran == ["callback:approve", "notify:approve"]

    # Resumed with no answer yet (a duplicate message): nothing is opened or sent again.
    again = suspended(waiting.resume(approval, APPROVAL))
    assert (again.ran, again.replayed) == ([], ["callback:approve", "notify:approve"])

    again.store.answer("approve", result={"by": "sam"})
    run = asyncio.run(again.resume(approval, APPROVAL))
    assert run.stored == {"approved": True, "answer": {"by": "sam"}}
    assert run.ran == []  # opening the callback and notifying happened once, before
    assert run.replayed == ["callback:approve", "notify:approve"]


def test_a_callback_answered_with_an_error_raises_in_the_kind() -> None:
    waiting = suspended(run_kind(approval, APPROVAL))
    waiting.store.answer("approve", error="rejected by legal")
    with pytest.raises(errors.PermanentError, match="rejected by legal"):
        asyncio.run(waiting.resume(approval, APPROVAL))


def test_a_callback_past_its_deadline_times_out_in_the_kind_which_escalates() -> None:
    waiting = suspended(run_kind(approval, APPROVAL))
    waiting.store.advance(60)
    run = asyncio.run(waiting.resume(approval, APPROVAL))
    assert run.stored == {"approved": False, "escalated": True}
    assert waiting.store.callbacks["approve"].state == "timed_out"
    # A late answer changes nothing: the timeout is recorded.
    waiting.store.answer("approve", result="too late")
    assert asyncio.run(waiting.resume(approval, APPROVAL)).stored == run.stored


def test_a_callback_timeout_the_kind_does_not_handle_fails_it() -> None:
    payload = {"timeout_seconds": 5, "on_timeout": "fail"}
    waiting = suspended(run_kind(approval, payload))
    waiting.store.advance(5)
    with pytest.raises(errors.PermanentError, match="no approval before the deadline"):
        asyncio.run(waiting.resume(approval, payload))


def test_a_callback_answered_before_the_code_looks_returns_without_suspending() -> None:
    store = EffectStore()

    @kind("test.waits.answered_in_notify")
    async def answered_in_notify(ctx: JobContext[None], p: Empty) -> Any:
        async def notify(token: str) -> str:
            store.answer("k", result=token)  # the outside party answers at once
            return "sent"

        return await ctx.wait_for_callback("k", timeout=10, notify=notify)

    run = asyncio.run(run_kind(answered_in_notify, {}, store=store))
    assert str(run.result).startswith("memory-token:")


class Asks(BaseModel):
    details: Any


def test_a_callback_keeps_the_details_it_was_opened_with_and_refuses_big_or_odd_ones() -> None:
    """What a callback asks is kept when it is opened (once: a replay writes nothing);
    details that are not JSON, or more than 8 KiB of it, fail the job."""

    @kind("test.waits.details")
    async def asks(ctx: JobContext[None], p: Asks) -> Any:
        return await ctx.wait_for_callback("k", timeout=10, details=p.details)

    waiting = suspended(run_kind(asks, {"details": {"tool": "pay", "args": {"amount": 1}}}))
    assert waiting.store.callback_details == {"k": {"tool": "pay", "args": {"amount": 1}}}
    again = suspended(waiting.resume(asks, {"details": "other"}))
    assert again.store.callback_details == {"k": {"tool": "pay", "args": {"amount": 1}}}

    for bad, why in (({"n": float("nan")}, "must be a JSON value"), ("x" * 9000, "8192 bytes")):
        with pytest.raises(errors.PermanentError, match=f"callback 'k' details: .*{why}"):
            asyncio.run(run_kind(asks, {"details": bad}))


# --- children ---------------------------------------------------------------------


def test_spawned_children_are_not_spawned_again_and_the_gather_waits_for_them() -> None:
    payload = {"children": 3, "at_least": 2}
    waiting = suspended(run_kind(fanout, payload))
    store = waiting.store
    assert waiting.wait.kind == "children" and waiting.wait.rule is not None
    assert (waiting.wait.rule.need, waiting.wait.rule.all) == (2, False)
    assert [key for key, _, _ in store.spawned] == ["child-0", "child-1", "child-2"]

    kids = list(store.children)
    store.finish_child(kids[0], result={"n": 0})
    again = suspended(waiting.resume(fanout, payload))
    assert again.ran == [] and len(store.spawned) == 3  # no child spawned twice

    store.finish_child(kids[2], result={"n": 2})
    run = asyncio.run(again.resume(fanout, payload))
    assert run.stored == {"children": 3, "succeeded": 2, "failed": 0, "unfinished": 1}
    assert run.ran == ["gather:children"] and len(store.spawned) == 3

    # The gather's outcome is recorded: a replay returns it, whatever finished since.
    store.finish_child(kids[1], error="boom")
    assert asyncio.run(again.resume(fanout, payload)).stored == run.stored


def test_a_gather_that_cannot_hold_any_more_raises_gather_failed() -> None:
    payload = {"children": 4, "at_least": 3}
    waiting = suspended(run_kind(fanout, payload))
    one, two, *_ = list(waiting.store.children)
    waiting.store.finish_child(one, error="no")
    again = suspended(waiting.resume(fanout, payload))  # 1 failed: 3 of 4 still possible
    again.store.finish_child(two, error="no")
    with pytest.raises(errors.GatherFailed, match="2 of 4 children failed"):
        asyncio.run(again.resume(fanout, payload))


def test_a_gather_of_all_tolerating_one_failure_waits_for_every_child() -> None:
    payload = {"children": 3, "tolerate": 1}
    waiting = suspended(run_kind(fanout, payload))
    a, b, c = list(waiting.store.children)
    waiting.store.finish_child(a, error="no")
    waiting.store.finish_child(b, result=1)
    waiting = suspended(waiting.resume(fanout, payload))
    waiting.store.finish_child(c, result=2)
    run = asyncio.run(waiting.resume(fanout, payload))
    assert run.stored == {"children": 3, "succeeded": 2, "failed": 1, "unfinished": 0}


def test_gathering_a_job_that_is_not_a_child_is_a_permanent_error() -> None:
    @kind("test.waits.gather_stranger")
    async def gather_stranger(ctx: JobContext[None], p: Empty) -> Any:
        return await ctx.gather("g", ["00000000-0000-0000-0000-000000000001"])

    with pytest.raises(errors.PermanentError, match="is not a child of this job"):
        asyncio.run(run_kind(gather_stranger, {}))


# --- keys -------------------------------------------------------------------------


class Empty(BaseModel):
    pass


class Twice(BaseModel):
    step: str


@kind("test.waits.twice")
async def twice(ctx: JobContext[None], p: Twice) -> Any:
    async def one() -> int:
        return 1

    if p.step == "sleep":
        await ctx.sleep("k", 0)
        await ctx.sleep("k", 0)
    elif p.step == "callback":
        await ctx.wait_for_callback("k", timeout=5)
        await ctx.wait_for_callback("k", timeout=5)
    elif p.step == "effect named like a wait":
        await ctx.effect("sleep:k", one)
        await ctx.sleep("k", 0)
    elif p.step == "spawn":
        await ctx.spawn("k", "demo.noop", {})
        await ctx.spawn("k", "demo.noop", {})
    elif p.step == "gather":
        kid = await ctx.spawn("k", "demo.noop", {})
        await ctx.gather("g", [kid], at_least=0)
        await ctx.gather("g", [kid], at_least=0)
    return "ran on"


@pytest.mark.parametrize(
    "step", ["sleep", "callback", "spawn", "gather", "effect named like a wait"]
)
def test_a_key_used_twice_in_one_run_is_a_permanent_error(step: str) -> None:
    store = EffectStore()
    if step == "callback":  # answered already, so the first wait returns
        waiting = suspended(run_kind(twice, {"step": step}, store=store))
        waiting.store.answer("k", result="yes")
    with pytest.raises(errors.PermanentError, match="used twice in one run"):
        asyncio.run(run_kind(twice, {"step": step}, store=store))


def test_the_same_key_in_different_kinds_of_step_is_no_clash() -> None:
    @kind("test.waits.one_key_each")
    async def one_key_each(ctx: JobContext[None], p: Empty) -> Any:
        async def one() -> int:
            return 1

        await ctx.effect("k", one)
        await ctx.sleep("k", 0)
        kid = await ctx.spawn("k", "demo.noop", {})
        return (await ctx.gather("k", [kid], at_least=0)).to_json()

    run = asyncio.run(run_kind(one_key_each, {}))
    assert run.ran == ["k", "sleep:k", "spawn:k", "gather:k"]


# --- the rule ---------------------------------------------------------------------


def rule(n: int, at_least: Any, tolerate: int | None = None) -> Rule:
    return Rule.of([f"c{i}" for i in range(n)], at_least, tolerate)


def states(succeeded: int = 0, failed: int = 0) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for i in range(succeeded):
        out[f"c{i}"] = "succeeded"
    for i in range(succeeded, succeeded + failed):
        out[f"c{i}"] = "failed"
    return out


@pytest.mark.parametrize(
    ("at_least", "tolerate", "succeeded", "failed", "decided"),
    [
        # at least N: decided once N succeeded, or once N can no longer succeed
        (3, None, 2, 0, None),
        (3, None, 3, 0, True),
        (3, None, 2, 2, None),  # 2 of 5 failed: the default tolerates n - N = 2
        (3, None, 3, 2, True),
        (3, None, 0, 3, False),
        (3, 0, 2, 1, False),  # tolerate 0: the first failure decides it
        (3, 1, 3, 1, True),
        # all: decided when every child finished; more failures than tolerated fail it
        ("all", None, 4, 0, None),
        ("all", None, 5, 0, True),
        ("all", None, 0, 1, False),
        ("all", 1, 3, 1, None),
        ("all", 1, 4, 1, True),
        ("all", 1, 3, 2, False),
        (0, None, 0, 0, True),
    ],
)
def test_the_gather_rule(
    at_least: Any, tolerate: int | None, succeeded: int, failed: int, decided: bool | None
) -> None:
    assert rule(5, at_least, tolerate).decide(states(succeeded, failed)) is decided


@pytest.mark.parametrize(
    ("children", "at_least", "tolerate", "message"),
    [
        (["a", "a"], "all", None, "a child is named twice"),
        (["a"], 2, None, "at_least must be 'all' or a number from 0 to 1"),
        (["a"], -1, None, "at_least must be"),
        (["a"], True, None, "at_least must be"),
        (["a"], "most", None, "at_least must be"),
        (["a"], 1, -1, "tolerate must be 0 or more"),
    ],
)
def test_a_gather_rule_that_makes_no_sense_is_refused_naming_what(
    children: list[str], at_least: Any, tolerate: int | None, message: str
) -> None:
    with pytest.raises(errors.PermanentError, match=message):
        Rule.of(children, at_least, tolerate)


def test_the_rule_is_decided_exactly_when_enough_succeeded_or_too_many_failed() -> None:
    """Every outcome of 4 children under every rule, against the rule's plain meaning."""
    for at_least, tolerate in itertools.product([0, 1, 2, 3, 4, "all"], [None, 0, 1, 2]):
        r = rule(4, at_least, tolerate)
        for outcome in itertools.product(["succeeded", "failed", "unfinished"], repeat=4):
            ok, failed = outcome.count("succeeded"), outcome.count("failed")
            got = r.decide(dict(zip(r.children, outcome, strict=True)))  # type: ignore[arg-type]
            if failed > r.tolerate:
                assert got is False, (at_least, tolerate, outcome)
            elif at_least == "all":
                assert got is (True if ok + failed == 4 else None), (at_least, tolerate, outcome)
            elif ok >= r.need:
                assert got is True, (at_least, tolerate, outcome)
            else:
                assert got is (False if 4 - failed < r.need else None), (at_least, outcome)
