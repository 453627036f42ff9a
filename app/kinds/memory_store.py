"""What the in-memory kind runner (app/kinds/testing.py) keeps of a job: its recorded
effects and what its waits see (EffectStore), and the crash it simulates."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from typing import Any

from app.kinds.generate import Usage
from app.kinds.messages import Message
from app.kinds.state import Published
from app.kinds.waits import CallbackStatus, ChildStatus


class SimulatedCrash(BaseException):
    """The attempt's process died here. A BaseException: a kind's ``except Exception``
    must not catch it, as it could not catch a SIGKILL."""


@dataclass
class EffectStore:
    """One job's recorded effects, as the effects table holds them: key to JSON result;
    and what its waits see: callbacks (key to CallbackStatus, answer them with
    ``answer``; ``callback_details``: what each asks), children (id to ChildStatus, finish them with ``finish_child``) and a
    clock (``clock``, advanced by the test)."""

    records: dict[str, Any] = field(default_factory=dict)
    shapes: dict[str, str] = field(default_factory=dict)  # each record's step shape, by key
    # The kind's version the job first started on (set by its first run_kind).
    version: str | None = None
    callbacks: dict[str, CallbackStatus] = field(default_factory=dict)
    callback_details: dict[str, Any] = field(default_factory=dict)  # as opened, by key
    children: dict[str, ChildStatus] = field(default_factory=dict)
    spawned: list[tuple[str, str, Any]] = field(default_factory=list)  # (key, kind, payload)
    # Streamed answers' chunks as job_output holds them: key to seq to text (once each).
    chunks: dict[str, dict[int, str]] = field(default_factory=dict)
    # Every chunk the attempts emitted, (key, seq) in order, a repeat included.
    chunk_writes: list[tuple[str, int]] = field(default_factory=list)
    usage: dict[str, Usage] = field(default_factory=dict)  # model effects' usage, by key
    # What the job published (ctx.set_state), as job_state holds it: key to its value,
    # version and the attempt that wrote it; ``values`` has the values alone.
    state: dict[str, Published] = field(default_factory=dict)
    clock: dt.datetime = field(default_factory=lambda: dt.datetime(2026, 1, 1, tzinfo=dt.UTC))
    # Messages sent to the job, in order, and the receive (its key) that consumed each.
    messages: list[Message] = field(default_factory=list)
    consumed: dict[int, str] = field(default_factory=dict)  # message id -> receive key
    # The run's deadline, fixed by the first run_kind on the store (None: none), and
    # whether that run happened (a resume keeps the deadline: app/kinds/memory_deadline.py).
    deadline: dt.datetime | None = None
    submitted: bool = False

    def answer(self, key: str, *, result: Any = None, error: str | None = None) -> None:
        """The outside party answers callback ``key`` (only a pending one changes)."""
        cb = self.callbacks[key]
        if cb.state == "pending":
            if error is not None:
                self.callbacks[key] = CallbackStatus("failed", cb.deadline, None, error)
            else:
                self.callbacks[key] = CallbackStatus("succeeded", cb.deadline, result)

    def finish_child(self, child: str, *, result: Any = None, error: str | None = None) -> None:
        if error is not None:
            self.children[child] = ChildStatus(child, "failed", error=error)
        else:
            self.children[child] = ChildStatus(child, "succeeded", result=result)

    def send(self, topic: str, body: Any = None) -> Message:
        """A message to the job (POST /v1/jobs/{id}/messages), after the ones sent before."""
        message = Message(len(self.messages) + 1, topic, body, self.clock)
        self.messages.append(message)
        return message

    def unread(self, topic: str) -> list[Message]:
        """The topic's messages no receive consumed yet, oldest first."""
        return [m for m in self.messages if m.topic == topic and m.id not in self.consumed]

    def advance(self, seconds: float) -> None:
        self.clock += dt.timedelta(seconds=seconds)

    @property
    def values(self) -> dict[str, Any]:
        """The published state, key to value."""
        return {key: p.value for key, p in self.state.items()}
