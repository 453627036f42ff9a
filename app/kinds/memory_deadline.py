"""A run's deadline in the in-memory kind runner (app/kinds/testing.py), as the real
engine enforces it (docs/explain/design.md#deadlines):

- the deadline is fixed when the job is submitted, i.e. the first ``run_kind`` on a store:
  ``deadline`` (an aware time), ``deadline_seconds`` from the store's clock, else the
  kind's ``@kind(deadline_seconds=...)``; a resume keeps it;
- a run (a claim) that finds the store's clock at or past it ends the job unrun;
- an attempt whose clock reaches it (a fake advanced ``store.clock``) is stopped at its
  next effect, as the worker's timer stops it at its next ``await``;
- every wait is bounded by it: ``KindSuspended.wait.wake_at`` is at the deadline at the
  latest (``least(wake_at, deadline)`` in suspend), and resuming at that time ends the job.

The end is ``KindDeadlinePassed``: the job ``dead_lettered``, ``dead_lettered_by``
``deadline``, "deadline passed", its unfinished children cancelled (their status in the
store ``failed`` with the error ``cancelled``, as a parent's gather sees a cancelled child).
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import uuid
from typing import Any

from app import errors
from app.kinds.waits import ChildStatus, Wait
from app.settings import bounds

# The end's reason as app.store.deadlines writes it (kinds do not import the store; a
# unit test holds the two equal).
REASON = "deadline passed"


class DeadlineStop(BaseException):
    """Stops an attempt at the deadline. A BaseException, as the worker's stop is a task
    cancel: a kind's ``except Exception`` must not catch it."""


class KindDeadlinePassed(errors.DeadlinePassed):
    """The run's deadline passed: the job ended as the engine ends it (``state``
    ``dead_lettered``, ``dead_lettered_by`` ``deadline``, ``reason`` "deadline passed");
    ``cancelled_children`` are the children it left unfinished, now cancelled; ``ran``
    and ``replayed`` as on KindRun (``ran`` over every call; ``replayed`` empty when the
    claim ended it unrun)."""

    state = "dead_lettered"
    dead_lettered_by = "deadline"
    reason = REASON

    def __init__(
        self,
        *,
        deadline: dt.datetime,
        at: dt.datetime,
        store: Any,
        job_id: uuid.UUID,
        attempt: int,
        ran: list[str],
        replayed: list[str],
        cancelled_children: list[str],
        unrun: bool,
    ) -> None:
        super().__init__(f"{REASON}: deadline {deadline.isoformat()}, clock {at.isoformat()}")
        self.deadline = deadline
        self.at = at  # the store's clock when the job ended
        self.store = store
        self.job_id = job_id
        self.attempt = attempt
        self.ran = ran
        self.replayed = replayed
        self.cancelled_children = cancelled_children
        self.unrun = unrun  # True: the run found it past its deadline and ran no code


def fix(
    now: dt.datetime,
    deadline: dt.datetime | None,
    deadline_seconds: float | None,
    kind_default: float | None,
) -> dt.datetime | None:
    """The deadline a submission at ``now`` gets, checked as POST /v1/jobs checks it (a
    ValueError where the API answers 422)."""
    if deadline is not None and deadline_seconds is not None:
        raise ValueError("give deadline or deadline_seconds, not both")
    if deadline is not None:
        if deadline.tzinfo is None:
            raise ValueError("deadline must have a time zone")
        ahead = (deadline - now).total_seconds()
        if ahead <= 0:
            raise ValueError("deadline is already past on the store's clock")
    else:
        seconds = deadline_seconds if deadline_seconds is not None else kind_default
        if seconds is None:
            return None
        if seconds <= 0:
            raise ValueError("deadline_seconds must be more than 0")
        ahead = seconds
        deadline = now + dt.timedelta(seconds=seconds)
    if ahead > bounds.MAX_DEADLINE_SECONDS:
        raise ValueError(f"a deadline is at most {bounds.MAX_DEADLINE_SECONDS} s ahead")
    return deadline


def bounded(wait: Wait, deadline: dt.datetime | None) -> Wait:
    """The wait as suspend writes it: woken at the deadline at the latest."""
    if deadline is None or (wait.wake_at is not None and wait.wake_at <= deadline):
        return wait
    return dataclasses.replace(wait, wake_at=deadline)


def cancel_children(children: dict[str, ChildStatus]) -> list[str]:
    """Cancel the unfinished children (the cancelling trigger); their ids, in order."""
    left = [c for c, status in children.items() if status.state == "unfinished"]
    for child in left:
        children[child] = ChildStatus(child, "failed", error="cancelled")
    return left
