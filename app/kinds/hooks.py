"""What each runner of a kind's code provides to ``JobContext`` (app/kinds/context.py):
where a step is recorded, the waits' storage, the budgets. The worker's runner
(app/worker/context.py) and the in-memory one (app/kinds/testing.py) implement them; a
runner without waits (a bare test double) refuses them. None of this is a kind's API.
"""

from __future__ import annotations

import abc
from typing import Any

from app import errors
from app.kinds import messages
from app.kinds.generate import Usage
from app.kinds.waits import CallbackStatus, ChildStatus


class RunnerHooks(abc.ABC):
    """The runner's side of a job context."""

    async def _reserve(self, budget: str, tokens: int) -> Any:
        """Reserve a model call under its budgets (what to settle, or None). A runner
        without shared budgets (the in-memory one) reserves nothing."""
        return None

    async def _settle(self, held: Any, usage: Usage | None) -> None:
        """Settle a reservation with the usage reported (None: no tokens used)."""
        return None  # nothing reserved, nothing to settle

    def _no_waits(self) -> errors.PermanentError:
        return errors.PermanentError(f"{type(self).__name__} does not run waits")

    async def _open_callback(self, key: str, seconds: float, details: Any) -> dict[str, Any]:
        """Create this job's callback ``key`` (once) with its deadline and details; the
        recorded result says when it was opened (never the token)."""
        raise self._no_waits()

    async def _callback_token(self, key: str) -> str:
        """The callback's token, derived again on every call (it is never recorded)."""
        raise self._no_waits()

    async def _callback_status(self, key: str) -> CallbackStatus:
        raise self._no_waits()

    async def _time_out_callback(self, key: str) -> CallbackStatus:
        """Mark a pending callback past its deadline timed out (unless an answer won)."""
        raise self._no_waits()

    async def _spawn(self, key: str, kind: str, payload: Any) -> str:
        """Create the child job (idempotent per key) and its message; its id."""
        raise self._no_waits()

    async def _children(self, ids: list[str]) -> list[ChildStatus]:
        """These children's states (an id that is not this job's child is an error)."""
        raise self._no_waits()

    async def _take_message(self, topic: str, key: str) -> messages.Message | None:
        """The message receive ``key`` consumed already, else the oldest unread one of
        ``topic``, marked consumed by ``key``; None when the topic has none unread."""
        raise self._no_waits()

    async def _recorded_chunks(self, key: str) -> list[tuple[int, str]]:
        """(seq, text) of the chunks of ``key`` that earlier attempts recorded."""
        return []

    @abc.abstractmethod
    async def _record(
        self, key: str, seq: int, value: Any, usage: Usage | None = None, *, shape: str
    ) -> Any:
        """Record ``value`` as effect ``key`` (the ``seq``-th of the job; a model call's
        ``usage`` with it; the step's ``shape``: app/kinds/steps.py) and return what is
        recorded under that key now: ``value``, or an earlier record that won."""

    def _after_effect(self, key: str) -> None:
        """Called once an effect is recorded; runners hook crash simulation here."""
        return None  # a runner without crash simulation does nothing here
