"""Run a job kind in memory, without PostgreSQL or SQS, for its unit tests.

```python
run = asyncio.run(run_kind(triage, TICKET, deps=fake_deps, crash_after_effect=1))
assert run.crashed_after == "triage"  # attempt 1 died once the model's answer was recorded
assert run.replayed == ["triage"] and run.ran == ["triage", "post"]
```

The recorded-effects store behaves like the worker's: an effect recorded by an
earlier attempt is returned, not run again. ``crash_after_effect=N`` kills the
first attempt once its N-th effect is recorded (the AFTER_EFFECT crash point);
``crash_inside_effect=N`` once the N-th effect's function returned but before it
is recorded (INSIDE_EFFECT: that function runs again). A second attempt then
replays the store, as another worker would.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from app import config
from app.config import Settings
from app.kinds.context import JobContext
from app.kinds.deps import close
from app.kinds.kind import Kind

D = TypeVar("D")
R = TypeVar("R")

_UNSET: Any = object()


class SimulatedCrash(BaseException):
    """The attempt's process died here. A BaseException: a kind's ``except Exception``
    must not catch it, as it could not catch a SIGKILL."""


@dataclass
class EffectStore:
    """One job's recorded effects, as the effects table holds them: key to JSON result."""

    records: dict[str, Any] = field(default_factory=dict)


class MemoryContext(JobContext[D]):
    """A JobContext recording into an EffectStore, with the crash points simulated."""

    def __init__(
        self,
        *,
        store: EffectStore,
        crash_after_effect: int | None = None,
        crash_inside_effect: int | None = None,
        **context: Any,
    ) -> None:
        super().__init__(recorded=store.records, **context)
        self.store = store
        self._crash_after = crash_after_effect
        self._crash_inside = crash_inside_effect

    async def _record(self, key: str, seq: int, value: Any) -> Any:
        if self._crash_inside == seq + 1:
            raise SimulatedCrash(key)
        # The first record wins, as the table's ON CONFLICT DO NOTHING makes it.
        return self.store.records.setdefault(key, value)

    def _after_effect(self, key: str) -> None:
        if self._crash_after == len(self.store.records):
            raise SimulatedCrash(key)


@dataclass(frozen=True)
class KindRun(Generic[R]):
    """What running a kind to its end did."""

    result: R  # the kind's return value, validated against its return annotation
    stored: Any  # the result as the JSON the worker stores
    ran: list[str]  # effects whose function ran, over every attempt, in order
    replayed: list[str]  # effects the last attempt returned from the record
    attempts: int
    crashed_after: str | None  # the effect at which the first attempt died, if it did
    effects: dict[str, Any]  # the recorded effects, key to result


async def run_kind(
    kind: Kind[D, Any, R],
    payload: Any,
    *,
    deps: D = _UNSET,
    settings: Settings | None = None,
    crash_after_effect: int | None = None,
    crash_inside_effect: int | None = None,
    store: EffectStore | None = None,
    job_id: uuid.UUID | None = None,
    attempt: int = 1,
) -> KindRun[R]:
    """Run ``kind`` on ``payload`` (a dict or its model), with a replay after a
    simulated crash when one is asked for. Without ``deps``, the kind's factory builds
    them from ``settings`` (default: the environment's), and they are closed after.
    The kind's own exceptions (Retry, PermanentError, ...) propagate."""
    store = store if store is not None else EffectStore()
    job_id = job_id or uuid.uuid4()
    parsed = kind.parse(payload)
    owned = deps is _UNSET
    if owned:
        deps = await kind.build_deps(settings or config.load())  # type: ignore[assignment]
    ran: list[str] = []
    attempts = 0
    crashed_after: str | None = None
    try:
        crash = {
            "crash_after_effect": crash_after_effect,
            "crash_inside_effect": crash_inside_effect,
        }
        while True:
            ctx: MemoryContext[D] = MemoryContext(
                store=store, job_id=job_id, kind=kind.name, attempt=attempt, deps=deps, **crash
            )
            attempts += 1
            try:
                value = await kind.run(ctx, parsed)
            except SimulatedCrash as died:
                crashed_after = str(died)
                crash = {}  # the next attempt runs to its end
                attempt += 1
                continue
            finally:
                ran.extend(ctx.ran)
            result = kind.check_result(value)
            return KindRun(
                result=result,
                stored=kind.to_json(result),
                ran=ran,
                replayed=ctx.replayed,
                attempts=attempts,
                crashed_after=crashed_after,
                effects=dict(store.records),
            )
    finally:
        if owned:
            await close(deps)
