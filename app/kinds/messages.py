"""``ctx.receive(topic)``: the next unread message to the job on a topic, consumed once,
as a recorded step.

The n-th receive on a topic in a run is the step ``receive:<topic>:<n>``: its function
takes the oldest unread message of the topic and marks it consumed by that key (so a run
that dies before the step is recorded takes the same message again, never the next one),
and the step records it. With none unread, the receive's deadline is recorded (the step
``receive-until:<topic>:<n>``, only when a wait is needed) and the job waits on the topic,
holding nothing; a message's arrival wakes it, and its code runs again from the top.
Past the deadline the step records the time-out instead: ReceiveTimedOut, raised again by
every replay.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from app import errors
from app.kinds import steps
from app.kinds.waits import Wait
from app.settings import bounds

if TYPE_CHECKING:
    from app.kinds.waiting import Waits

RECEIVE, RECEIVE_UNTIL = "receive:", "receive-until:"
# The longest a receive may wait (as a sleep's or a callback's).
MAX_WAIT_SECONDS = 366 * 24 * 3600


@dataclass(frozen=True)
class Message:
    """A message to the job: its ``topic`` and ``body`` (any JSON), its ``id`` (the order
    of the job's messages) and when it was sent."""

    id: int
    topic: str
    body: Any
    sent_at: dt.datetime

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "topic": self.topic,
            "body": self.body,
            "sent_at": self.sent_at.astimezone(dt.UTC).isoformat(),
        }

    @classmethod
    def from_json(cls, value: dict[str, Any]) -> Message:
        return cls(
            int(value["id"]),
            str(value["topic"]),
            value["body"],
            dt.datetime.fromisoformat(value["sent_at"]),
        )


def check_topic(topic: Any) -> str:
    """A topic: 1 to MAX_TOPIC_CHARS printable characters (a BadRequest names what is
    wrong; the kind's side turns it into a PermanentError)."""
    if (
        not isinstance(topic, str)
        or not 1 <= len(topic) <= bounds.MAX_TOPIC_CHARS
        or not topic.isprintable()
    ):
        raise errors.BadRequest(
            f"topic must be 1 to {bounds.MAX_TOPIC_CHARS} printable characters, not {topic!r}"
        )
    return topic


async def receive(ctx: Waits, topic: str, n: int, seconds: float | None) -> Message:
    """The body of ``JobContext.receive``: its ``n``-th receive on ``topic`` in this run,
    waiting ``seconds`` at most (None: no limit)."""
    try:
        check_topic(topic)
    except errors.BadRequest as exc:
        raise errors.PermanentError(f"receive: {exc}") from None
    if seconds is not None and (isinstance(seconds, bool) or not 0 < seconds <= MAX_WAIT_SECONDS):
        raise errors.PermanentError(
            f"receive {topic!r}: timeout must be more than 0 and at most {MAX_WAIT_SECONDS} s"
        )
    key = f"{RECEIVE}{topic}:{n}"

    async def until() -> str | None:
        if seconds is None:
            return None
        return (ctx.now() + dt.timedelta(seconds=seconds)).astimezone(dt.UTC).isoformat()

    async def take() -> dict[str, Any]:
        found = await ctx._take_message(topic, key)
        if found is not None:
            return {"message": found.to_json()}
        due: str | None = await ctx._step(f"{RECEIVE_UNTIL}{topic}:{n}", until, steps.RECEIVE)
        deadline = dt.datetime.fromisoformat(due) if due is not None else None
        if deadline is None or deadline > ctx.now():
            raise errors.Suspend(Wait("message", topic, wake_at=deadline))
        return {"timed_out": due}

    outcome: dict[str, Any] = await ctx._step(key, take, steps.RECEIVE)
    if "timed_out" in outcome:
        raise errors.ReceiveTimedOut(f"receive {topic!r}: no message by {outcome['timed_out']}")
    return Message.from_json(outcome["message"])
