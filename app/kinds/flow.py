"""Flow control by key (docs/howto/flow-control.md): what ``@kind`` declares of a job's key
and the limits per key, checked at start-up.

```python
@kind("chat.reply", key=lambda p: p.conversation_id, concurrency=1)
async def reply(ctx: JobContext[None], p: Message) -> str: ...
```

A key is scoped to the tenant and the kind: tenant A's "c-1" is not tenant B's, and
another kind's "c-1" is another key. A job holds its key from its first claim until it
ends (a wait, a retry or a crash keeps it), so "one at a time per conversation" holds
across a human's approval or a worker's death.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal, get_args

from app import errors

IfActive = Literal["enqueue", "reject", "cancel_active", "drop_new"]
"""What a new job of a key does when one of the key's jobs is active (not finished:
queued, running, waiting, retrying), as LangGraph and Inngest name them: ``enqueue``
(wait its turn, the default), ``reject`` (409 naming the active job), ``cancel_active``
(cancel the active ones, run the new one once they stopped), ``drop_new`` (write nothing,
answer with the active job)."""
IF_ACTIVE: tuple[IfActive, ...] = get_args(IfActive)
MAX_KEY_CHARS = 200
MAX_CONCURRENCY = 10_000
MAX_DEBOUNCE_SECONDS = 24 * 3600
MAX_RATE_PERIOD_SECONDS = 24 * 3600
MAX_RATE = 1_000_000


@dataclass(frozen=True)
class Rate:
    """At most ``limit`` of a key's jobs start in any ``per_seconds``."""

    limit: int
    per_seconds: float


@dataclass(frozen=True)
class Flow:
    """A kind's flow control: how a job's key is computed, and the limits per key."""

    key: Callable[[Any], Any] | None = None  # the payload (the kind's model) -> its key
    concurrency: int | None = None  # jobs of a key holding it at once; None: no limit
    if_active: IfActive = "enqueue"
    debounce_seconds: float | None = None  # the last job of a burst runs, this long after it
    rate: Rate | None = None

    @property
    def decides_at_submit(self) -> bool:
        """A submission looks at the key's other jobs (reject, drop, cancel, debounce)."""
        return self.if_active != "enqueue" or self.debounce_seconds is not None

    def to_json(self) -> dict[str, Any]:
        """As GET /v1/kinds shows it."""
        return {
            "keyed": self.key is not None,
            "concurrency": self.concurrency,
            "if_active": self.if_active,
            "debounce_seconds": self.debounce_seconds,
            "rate": None
            if self.rate is None
            else {"limit": self.rate.limit, "per_seconds": self.rate.per_seconds},
        }


NO_FLOW = Flow()


def checked(
    name: str,
    *,
    key: Callable[[Any], Any] | None,
    concurrency: int | None,
    if_active: str,
    debounce_seconds: float | None,
    rate: Rate | tuple[int, float] | None,
) -> Flow:
    """The kind's flow control, or ConfigError naming the option that is wrong."""
    where = f"kind {name!r}"
    if key is not None and not callable(key):
        raise errors.ConfigError(f"{where}: key= must be a function of the payload, not {key!r}")
    if if_active not in IF_ACTIVE:
        raise errors.ConfigError(
            f"{where}: if_active={if_active!r} is not one of "
            + ", ".join(repr(p) for p in IF_ACTIVE)
        )
    if concurrency is not None and not (
        _is_int(concurrency) and 1 <= concurrency <= MAX_CONCURRENCY
    ):
        raise errors.ConfigError(
            f"{where}: concurrency={concurrency!r} must be an int from 1 to {MAX_CONCURRENCY}"
        )
    if debounce_seconds is not None:
        if not (
            _is_number(debounce_seconds)
            and math.isfinite(debounce_seconds)
            and 0 < debounce_seconds <= MAX_DEBOUNCE_SECONDS
        ):
            raise errors.ConfigError(
                f"{where}: debounce_seconds={debounce_seconds!r} must be more than 0 and at "
                f"most {MAX_DEBOUNCE_SECONDS} (a day)"
            )
        if if_active != "enqueue":
            raise errors.ConfigError(
                f"{where}: debounce_seconds replaces a key's waiting jobs itself; give it "
                f"with if_active='enqueue' (the default), not {if_active!r}"
            )
    if isinstance(rate, tuple):
        if len(rate) != 2:
            raise errors.ConfigError(f"{where}: rate={rate!r} must be (limit, per_seconds)")
        rate = Rate(*rate)
    if rate is not None and not isinstance(rate, Rate):
        raise errors.ConfigError(
            f"{where}: rate={rate!r} must be (limit, per_seconds) or Rate(limit, per_seconds)"
        )
    if rate is not None:
        ok_limit = _is_int(rate.limit) and 1 <= rate.limit <= MAX_RATE
        ok_per = (
            _is_number(rate.per_seconds)
            and math.isfinite(rate.per_seconds)
            and 0 < rate.per_seconds <= MAX_RATE_PERIOD_SECONDS
        )
        if not (ok_limit and ok_per):
            raise errors.ConfigError(
                f"{where}: rate={rate!r}: limit must be an int from 1 to {MAX_RATE} and "
                f"per_seconds more than 0 and at most {MAX_RATE_PERIOD_SECONDS} (a day)"
            )
    if concurrency is None and if_active != "enqueue":
        # "One active at a time" is what these policies are about: a cancelled job still
        # stopping keeps its key until it has stopped, so the new one never overlaps it.
        concurrency = 1
    return Flow(key, concurrency, if_active, debounce_seconds, rate)


def _is_int(value: object) -> bool:
    """An int, not a bool (True is an int to Python, not a limit to a reader)."""
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def key_of(name: str, flow: Flow, payload: Any, given: str | None) -> str | None:
    """A job's key: the one its submission gave, else its kind's key function's, else
    None; BadRequest when either is not a text of 1 to MAX_KEY_CHARS characters."""
    if given is not None:
        return _checked_key(given, "key")
    if flow.key is None:
        return None
    try:
        made = flow.key(payload)
    except Exception as exc:  # the kind's code, on this payload
        raise errors.BadRequest(
            f"kind {name!r}: its key function failed on this payload: {type(exc).__name__}: {exc}"
        ) from exc
    if made is None:
        return None
    if isinstance(made, int) and not isinstance(made, bool):
        made = str(made)
    if not isinstance(made, str):
        raise errors.BadRequest(
            f"kind {name!r}: its key function returned {type(made).__name__}, not a str"
        )
    return _checked_key(made, f"kind {name!r}'s key")


def _checked_key(key: str, what: str) -> str:
    if not 1 <= len(key) <= MAX_KEY_CHARS:
        raise errors.BadRequest(f"{what} must be 1 to {MAX_KEY_CHARS} characters, not {len(key)}")
    return key
