"""ctx.receive through the in-memory kind runner (app/kinds/testing.py): a message queued
before the run is taken at once; with none, the run ends suspended on the topic; each
message is consumed once, in order per topic; a crash between the take and its record
replays the same message, never the next; a timeout raises ReceiveTimedOut, recorded."""

from __future__ import annotations

import asyncio
import datetime as dt
from typing import Any

import pytest
from pydantic import BaseModel

from app import errors
from app.demos.chat import chat
from app.kinds import JobContext, kind
from app.kinds.memory_store import EffectStore
from app.kinds.testing import run_kind
from tests.unit.test_waits_replay import suspended

pytestmark = pytest.mark.unit


def test_messages_sent_before_the_run_are_answered_in_order_without_waiting() -> None:
    store = EffectStore()
    for text in ("one", "two"):
        store.send("user", text)
    store.send("other", "not for it")
    run = asyncio.run(run_kind(chat, {"messages": 2}, store=store))
    assert [a["reply"] for a in run.result["answers"]] == ["you said: one", "you said: two"]
    assert run.ran == ["receive:user:1", "answer-0", "receive:user:2", "answer-1"]
    assert store.consumed == {1: "receive:user:1", 2: "receive:user:2"}
    assert [m.body for m in store.unread("other")] == ["not for it"]


def test_with_none_unread_it_waits_on_the_topic_and_a_message_resumes_it() -> None:
    payload = {"messages": 2}
    first = suspended(run_kind(chat, payload))
    assert (first.wait.kind, first.wait.key, first.wait.wake_at) == ("message", "user", None)
    assert first.ran == ["receive-until:user:1"]  # the deadline (none) recorded once

    first.store.send("user", "hello")
    second = suspended(first.resume(chat, payload))
    assert second.wait.key == "user" and second.ran[-3:] == [
        "receive:user:1",
        "answer-0",
        "receive-until:user:2",
    ]
    second.store.send("user", "bye")
    run = asyncio.run(second.resume(chat, payload))
    assert [a["message"] for a in run.result["answers"]] == [1, 2]
    # The message was there: the deadline recorded for the wait is not read again.
    assert run.replayed == ["receive:user:1", "answer-0"]


def test_a_crash_before_the_receive_is_recorded_replays_the_same_message() -> None:
    store = EffectStore()
    for text in ("first", "second"):
        store.send("user", text)
    # Effect 1 is receive:user:1: its function took "first", and the attempt dies before
    # the record. The next attempt takes the message marked with its key again.
    run = asyncio.run(run_kind(chat, {"messages": 2}, store=store, crash_inside_effect=1))
    assert run.crashed_after == "receive:user:1" and run.attempts == 2
    assert [a["reply"] for a in run.result["answers"]] == ["you said: first", "you said: second"]
    assert store.consumed == {1: "receive:user:1", 2: "receive:user:2"}


def test_a_timeout_raises_receive_timed_out_and_a_replay_raises_it_again() -> None:
    payload = {"messages": 2, "timeout_seconds": 60}
    first = suspended(run_kind(chat, payload))
    assert first.wait.wake_at == first.store.clock + dt.timedelta(seconds=60)
    first.store.advance(61)
    run = asyncio.run(first.resume(chat, payload))
    assert run.result == {"answers": [], "timed_out": True}
    assert run.effects["receive:user:1"] == {"timed_out": first.wait.wake_at.isoformat()}
    # A message after the time-out is left for the next receive, not the one timed out.
    first.store.send("user", "late")
    again = asyncio.run(first.resume(chat, payload))
    assert again.result == {"answers": [], "timed_out": True}
    assert [m.body for m in first.store.unread("user")] == ["late"]


class Topic(BaseModel):
    topic: Any = "user"
    timeout: Any = None


@kind("test.receive_checked")
async def receive_checked(ctx: JobContext[None], p: Topic) -> Any:
    return (await ctx.receive(p.topic, timeout=p.timeout)).body


@pytest.mark.parametrize(
    ("payload", "says"),
    [
        ({"topic": ""}, "topic must be 1 to 100 printable characters"),
        ({"topic": "x" * 101}, "topic must be 1 to 100"),
        ({"topic": "a\nb"}, "printable"),
        ({"timeout": 0}, "timeout must be more than 0"),
        ({"timeout": True}, "timeout must be more than 0"),
    ],
)
def test_a_bad_topic_or_timeout_is_a_permanent_error_naming_it(
    payload: dict[str, Any], says: str
) -> None:
    store = EffectStore()
    with pytest.raises(errors.PermanentError, match=says):
        asyncio.run(run_kind(receive_checked, payload, store=store))
    assert store.records == {}
