"""The waits of a job context: ``sleep``, ``wait_for_callback``, ``callback_token``,
``spawn``, ``gather`` and ``receive``, each a recorded step (``_step``, JobContext's) of
its own prefix in the effects table, so a replay answers as the first run did. A mixin
of app/kinds/context.py's JobContext; the runner's side is app/kinds/hooks.py."""

from __future__ import annotations

import datetime as dt
import functools
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, Literal

from app import errors
from app.kinds import messages, steps
from app.kinds.hooks import RunnerHooks
from app.kinds.output import checked_json
from app.kinds.waits import Gathered, Rule, Wait

# The longest wait a kind may ask for: a sleep, or a callback's timeout.
MAX_WAIT = dt.timedelta(days=366)
MAX_DETAILS_BYTES = 8 * 1024  # a callback's details: what it asks, not a document
# The recorded steps of the waits, under these prefixes in the effects table.
SLEEP, CALLBACK, NOTIFY, SPAWN, GATHER = "sleep:", "callback:", "notify:", "spawn:", "gather:"


class Waits(RunnerHooks):
    """The waits of JobContext: each holds no worker while it waits."""

    if TYPE_CHECKING:
        _receives: dict[str, int]

        async def _step(self, key: str, fn: Callable[[], Any], shape: str) -> Any: ...

    def now(self) -> dt.datetime:
        """The runner's clock (the worker's follows the database's)."""
        return dt.datetime.now(dt.UTC)

    async def sleep(
        self, key: str, seconds: float | None = None, *, until: dt.datetime | None = None
    ) -> None:
        """Wait ``seconds`` (or until ``until``, an aware datetime), holding no worker.

        The due time is recorded the first time; the job then waits, and its code runs
        again from the top once the timer is due: this call then returns at once."""
        if (seconds is None) == (until is None):
            raise errors.PermanentError(f"sleep {key!r}: give seconds or until, not both")

        async def due() -> str:
            start = self.now()
            if until is not None:
                if until.tzinfo is None:
                    raise errors.PermanentError(f"sleep {key!r}: until needs a time zone")
                at = until
            else:
                assert seconds is not None
                if not 0 <= seconds <= MAX_WAIT.total_seconds():
                    raise errors.PermanentError(
                        f"sleep {key!r}: seconds must be 0 to {int(MAX_WAIT.total_seconds())}"
                    )
                at = start + dt.timedelta(seconds=seconds)
            if at - start > MAX_WAIT:
                raise errors.PermanentError(f"sleep {key!r}: {at} is more than a year away")
            return at.astimezone(dt.UTC).isoformat()

        wake_at = dt.datetime.fromisoformat(await self._step(SLEEP + key, due, steps.SLEEP))
        if wake_at > self.now():
            raise errors.Suspend(Wait("timer", key, wake_at=wake_at))

    async def wait_for_callback(
        self,
        key: str,
        *,
        timeout: float,  # noqa: ASYNC109 - a deadline for the answer, not for this call
        notify: Callable[[str], Awaitable[Any]] | Callable[[str], Any] | None = None,
        details: Any = None,
    ) -> Any:
        """Wait for an outside answer: ``POST /v1/callbacks/{token}`` with ``{"result":
        ...}`` (returned here) or ``{"error": ...}`` (raised as CallbackFailed). No answer
        within ``timeout`` seconds (a heartbeat pushes the deadline) raises
        CallbackTimedOut. ``notify(token)`` hands the token to the outside party; it is
        an effect, run once (its result is recorded under ``notify:{key}``), ``async
        def`` or plain as ``effect``'s ``fn``. ``details`` (JSON, up to 8 KiB) says what
        is asked: kept with the callback when it is opened, and shown to whoever answers
        (GET /v1/jobs/{id}/callbacks, the web view, ``tasklease jobs show``)."""
        if not 0 < timeout <= MAX_WAIT.total_seconds():
            raise errors.PermanentError(
                f"callback {key!r}: timeout must be 1 to {int(MAX_WAIT.total_seconds())} s"
            )
        if details is not None:
            details = checked_json(details, f"callback {key!r} details", MAX_DETAILS_BYTES)
        await self._step(
            CALLBACK + key,
            functools.partial(self._open_callback, key, timeout, details),
            steps.CALLBACK,
        )
        if notify is not None:
            token = await self._callback_token(key)
            await self._step(NOTIFY + key, functools.partial(notify, token), steps.NOTIFY)
        status = await self._callback_status(key)
        if status.state == "pending" and status.deadline <= self.now():
            status = await self._time_out_callback(key)
        if status.state == "succeeded":
            return status.result
        if status.state == "failed":
            raise errors.CallbackFailed(
                f"callback {key!r} answered with an error: {status.error}", error=status.error
            )
        if status.state == "timed_out":
            raise errors.CallbackTimedOut(f"callback {key!r}: no answer by {status.deadline}")
        raise errors.Suspend(Wait("callback", key, wake_at=status.deadline))

    async def callback_token(self, key: str) -> str:
        """The token of this job's callback ``key`` (for a notify that is not a function
        of the token alone). Only the lease holder's code can learn it."""
        return await self._callback_token(key)

    async def spawn(self, key: str, kind: str, payload: Any) -> str:
        """Create a child job (same tenant, listed under this job), once per key; returns
        its id. The child runs on its own; ``gather`` waits for it."""
        if not isinstance(kind, str) or not kind:
            raise errors.PermanentError(f"spawn {key!r}: kind must be a kind's name")
        child: str = await self._step(
            SPAWN + key, functools.partial(self._spawn, key, kind, payload), steps.spawn(kind)
        )
        return child

    async def gather(
        self,
        key: str,
        children: list[str],
        *,
        at_least: int | Literal["all"] = "all",
        tolerate: int | None = None,
    ) -> Gathered:
        """Wait, holding no worker, until the rule over these children holds: ``at_least``
        of them succeeded (or ``"all"`` finished), with no more than ``tolerate`` failed
        (default: as many as the rule allows). Raises GatherFailed when it cannot hold.
        The outcome is recorded: a replay returns the same answer."""
        rule = Rule.of([str(c) for c in children], at_least, tolerate)

        async def outcome() -> dict[str, Any]:
            statuses = await self._children(list(rule.children))
            decided = rule.decide({c.id: c.state for c in statuses})
            if decided is None:
                raise errors.Suspend(Wait("children", key, rule=rule))
            gathered = Gathered(
                results={c.id: c.result for c in statuses if c.state == "succeeded"},
                errors={c.id: c.error or "failed" for c in statuses if c.state == "failed"},
                unfinished=[c.id for c in statuses if c.state == "unfinished"],
            )
            return {"ok": decided, **gathered.to_json()}

        recorded: dict[str, Any] = await self._step(GATHER + key, outcome, steps.GATHER)
        gathered = Gathered.from_json(recorded)
        if not recorded["ok"]:
            raise errors.GatherFailed(
                f"gather {key!r}: {len(gathered.errors)} of {len(rule.children)} children "
                f"failed, more than the rule tolerates ({rule.tolerate}): "
                + "; ".join(f"{c}: {e}" for c, e in list(gathered.errors.items())[:5])
            )
        return gathered

    async def receive(
        self,
        topic: str,
        *,
        timeout: float | None = None,  # noqa: ASYNC109 - a deadline for a message, not this call
    ) -> messages.Message:
        """The next unread message to this job on ``topic`` (``POST
        /v1/jobs/{id}/messages``), consumed once: a recorded step, so a replay returns the
        same message, never the next one. With none unread, the job waits holding no
        worker until one comes; none within ``timeout`` seconds (default: no limit)
        raises ReceiveTimedOut. Receives are numbered per topic in the order the code
        makes them: the code must make them in the same order on every run."""
        n = self._receives[topic] = self._receives.get(topic, 0) + 1
        return await messages.receive(self, topic, n, timeout)
