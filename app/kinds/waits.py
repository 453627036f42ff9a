"""What a waiting job waits for, and the rule a gather of child jobs follows.

A kind never builds these: ``ctx.sleep``, ``ctx.wait_for_callback``, ``ctx.gather`` and
``ctx.receive`` do, and raise ``errors.Suspend(Wait(...))`` when the job must wait. The runner (the
worker's engine, or the in-memory runner) turns that into the ``waiting`` state.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from typing import Any, Literal

from app import errors

ChildState = Literal["succeeded", "failed", "unfinished"]


@dataclass(frozen=True)
class Rule:
    """A gather's completion rule over ``children`` (job ids, as strings).

    ``need`` successes decide it (``all``: every child finished); more than
    ``tolerate`` failures (dead-lettered or cancelled) decide it as failed. The SQL
    function ``gather_decided`` (migration 0007) evaluates the same rule.
    """

    children: tuple[str, ...]
    need: int
    all: bool
    tolerate: int

    @classmethod
    def of(cls, children: list[str], at_least: int | Literal["all"], tolerate: int | None) -> Rule:
        n = len(children)
        if len(set(children)) != n:
            raise errors.PermanentError("gather: a child is named twice")
        if at_least == "all":
            need, every = n, True
            allowed = 0 if tolerate is None else tolerate
        elif isinstance(at_least, int) and not isinstance(at_least, bool) and 0 <= at_least <= n:
            need, every = at_least, False
            allowed = n - at_least if tolerate is None else tolerate
        else:
            raise errors.PermanentError(
                f"gather: at_least must be 'all' or a number from 0 to {n}, not {at_least!r}"
            )
        if not isinstance(allowed, int) or isinstance(allowed, bool) or allowed < 0:
            raise errors.PermanentError(f"gather: tolerate must be 0 or more, not {tolerate!r}")
        return cls(tuple(children), need, every, allowed)

    def to_json(self) -> dict[str, Any]:
        return {
            "children": list(self.children),
            "need": self.need,
            "all": self.all,
            "tolerate": self.tolerate,
        }

    def decide(self, states: dict[str, ChildState]) -> bool | None:
        """True: the rule holds; False: it cannot any more; None: not decided yet."""
        ok = sum(1 for c in self.children if states.get(c) == "succeeded")
        failed = sum(1 for c in self.children if states.get(c) == "failed")
        n = len(self.children)
        if failed > self.tolerate:
            return False
        if self.all:
            return True if ok + failed >= n else None
        if ok >= self.need:
            return True
        return False if n - failed < self.need else None


@dataclass(frozen=True)
class Gathered:
    """What a gather returns: the children's results and errors, and those not finished
    when the rule held (they go on running; gather again to wait for them)."""

    results: dict[str, Any] = field(default_factory=dict)
    errors: dict[str, str] = field(default_factory=dict)
    unfinished: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {"results": self.results, "errors": self.errors, "unfinished": self.unfinished}

    @classmethod
    def from_json(cls, value: dict[str, Any]) -> Gathered:
        return cls(dict(value["results"]), dict(value["errors"]), list(value["unfinished"]))


@dataclass(frozen=True)
class ChildStatus:
    """A child job as a gather sees it."""

    id: str
    state: ChildState
    result: Any = None
    error: str | None = None


@dataclass(frozen=True)
class CallbackStatus:
    """A callback as its job sees it."""

    state: Literal["pending", "succeeded", "failed", "timed_out"]
    deadline: dt.datetime
    result: Any = None
    error: str | None = None


@dataclass(frozen=True)
class Wait:
    """Why a job waits: ``kind`` is 'timer', 'callback', 'children' or 'message' (``key``
    the topic); ``wake_at`` a timer's due time or a callback's or a receive's deadline;
    ``rule`` a gather's rule."""

    kind: Literal["timer", "callback", "children", "message"]
    key: str
    wake_at: dt.datetime | None = None
    rule: Rule | None = None

    def describe(self) -> str:
        if self.kind == "timer" and self.wake_at is not None:
            return f"timer {self.key} until {self.wake_at.isoformat()}"
        if self.kind == "callback" and self.wake_at is not None:
            return f"callback {self.key}, deadline {self.wake_at.isoformat()}"
        if self.kind == "message":
            until = f", deadline {self.wake_at.isoformat()}" if self.wake_at is not None else ""
            return f"message on {self.key}{until}"
        rule = self.rule
        if rule is None:
            return f"{self.kind} {self.key}"
        need = "all" if rule.all else f"at least {rule.need}"
        return f"children {self.key}: {need} of {len(rule.children)}, tolerating {rule.tolerate}"
