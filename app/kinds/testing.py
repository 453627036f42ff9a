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
is recorded (INSIDE_EFFECT: that function runs again); ``crash_inside_stream=N`` once
N chunks of a streamed answer are written (INSIDE_STREAM: the next attempt continues
the answer from them). A second attempt then
replays the store, as another worker would.

What the kind published (``ctx.set_state``) is ``run.state`` (key to value), and
``store.state`` has each key's version and attempt, as GET /v1/jobs/{id}/state shows them.

A kind that waits ends the run with ``KindSuspended`` (its ``wait`` says for what);
answer its callback, finish its children, send it a message or advance the clock on
``store``, then ``resume`` it: its code runs again from the top, replaying what was
recorded. ``store.send(topic, body)`` queues a message for ``ctx.receive`` (before the
run too: a receive with one unread does not wait).

```python
with pytest.raises(KindSuspended) as waiting:
    await run_kind(approval, {"timeout_seconds": 60})
waiting.value.store.answer("approve", result={"ok": True})
run = await waiting.value.resume(approval, {"timeout_seconds": 60})
```
"""

from __future__ import annotations

import datetime as dt
import uuid
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from app import errors
from app.kinds.context import JobContext
from app.kinds.deps import close
from app.kinds.generate import Usage
from app.kinds.kind import Kind
from app.kinds.memory_deadline import (
    DeadlineStop,
    KindDeadlinePassed,
    bounded,
    cancel_children,
    fix,
)
from app.kinds.memory_store import EffectStore, SimulatedCrash
from app.kinds.messages import Message
from app.kinds.output import Emitted
from app.kinds.state import Published, too_many_keys
from app.kinds.waits import CallbackStatus, ChildStatus, Wait
from app.settings import bounds, config
from app.settings.config import Settings

D = TypeVar("D")
R = TypeVar("R")

_UNSET: Any = object()


class MemoryContext(JobContext[D]):
    """A JobContext recording into an EffectStore, with the crash points simulated."""

    def __init__(
        self,
        *,
        store: EffectStore,
        crash_after_effect: int | None = None,
        crash_inside_effect: int | None = None,
        crash_inside_stream: int | None = None,
        **context: Any,
    ) -> None:
        super().__init__(
            recorded=store.records,
            shapes=store.shapes,
            started_version=store.version,
            **context,
        )
        self.store = store
        self._crash_after = crash_after_effect
        self._crash_inside = crash_inside_effect
        self._crash_stream = crash_inside_stream

    async def _output(self, item: Emitted) -> None:
        await super()._output(item)
        if item.type == "chunk" and item.key is not None and item.seq is not None:
            self.store.chunk_writes.append((item.key, item.seq))
            written = self.store.chunks.setdefault(item.key, {})
            written.setdefault(item.seq, item.data["text"])
            # INSIDE_STREAM: the attempt dies once this many chunks of it are written.
            if self._crash_stream == sum(1 for i in self._emitted if i.type == "chunk"):
                raise SimulatedCrash(item.key)

    async def _recorded_chunks(self, key: str) -> list[tuple[int, str]]:
        return sorted(self.store.chunks.get(key, {}).items())

    async def _set_state(self, key: str, value: Any) -> None:
        # As the set_state query: the same value changes nothing, a new key needs room,
        # a change bumps the version and goes on the stream.
        held = self.store.state.get(key)
        if held is not None and held.value == value:
            return
        if held is None and len(self.store.state) >= bounds.MAX_STATE_KEYS:
            raise too_many_keys(key)
        version = 1 if held is None else held.version + 1
        self.store.state[key] = Published(value, version, self.attempt)
        data = {"key": key, "value": value, "version": version}
        await super()._output(Emitted(self.now(), "state", data, key=key))

    async def _record(
        self, key: str, seq: int, value: Any, usage: Usage | None = None, *, shape: str
    ) -> Any:
        if self._crash_inside == seq + 1:
            raise SimulatedCrash(key)
        self.store.shapes.setdefault(key, shape)
        # The first record wins, as the table's ON CONFLICT DO NOTHING makes it.
        if usage is not None and key not in self.store.records:
            self.store.usage[key] = usage
        return self.store.records.setdefault(key, value)

    def _after_effect(self, key: str) -> None:
        if self._crash_after == len(self.store.records):
            raise SimulatedCrash(key)
        # The worker's timer stops the attempt at the deadline, at its next await.
        if self.store.deadline is not None and self.now() >= self.store.deadline:
            raise DeadlineStop(key)

    def now(self) -> dt.datetime:
        return self.store.clock

    async def _callback_token(self, key: str) -> str:
        return f"memory-token:{self.job_id}:{key}"

    async def _open_callback(self, key: str, seconds: float, details: Any) -> dict[str, Any]:
        deadline = self.now() + dt.timedelta(seconds=seconds)
        if key not in self.store.callbacks:
            self.store.callbacks[key] = CallbackStatus("pending", deadline)
            self.store.callback_details[key] = details
        return {"opened_at": self.now().isoformat()}

    async def _callback_status(self, key: str) -> CallbackStatus:
        return self.store.callbacks[key]

    async def _time_out_callback(self, key: str) -> CallbackStatus:
        cb = self.store.callbacks[key]
        if cb.state == "pending" and cb.deadline <= self.now():
            self.store.callbacks[key] = CallbackStatus("timed_out", cb.deadline)
        return self.store.callbacks[key]

    async def _take_message(self, topic: str, key: str) -> Message | None:
        mine = [m for m in self.store.messages if self.store.consumed.get(m.id) == key]
        if mine:
            return mine[0]
        unread = self.store.unread(topic)
        if not unread:
            return None
        self.store.consumed[unread[0].id] = key
        return unread[0]

    async def _spawn(self, key: str, kind: str, payload: Any) -> str:
        child = str(uuid.uuid5(self.job_id, key))
        self.store.spawned.append((key, kind, payload))
        self.store.children.setdefault(child, ChildStatus(child, "unfinished"))
        return child

    async def _children(self, ids: list[str]) -> list[ChildStatus]:
        unknown = [i for i in ids if i not in self.store.children]
        if unknown:
            raise errors.PermanentError(f"gather: {unknown[0]} is not a child of this job")
        return [self.store.children[i] for i in ids]


class KindSuspended(errors.Suspend):
    """The run ended with the job waiting, as the worker would leave it ``waiting``:
    ``wait`` says for what. ``resume`` runs it again on the same store and job id (the
    attempt is not used up: a wait gives it back)."""

    def __init__(
        self,
        wait: Wait,
        *,
        store: EffectStore,
        job_id: uuid.UUID,
        attempt: int,
        ran: list[str],
        replayed: list[str],
    ) -> None:
        super().__init__(wait)
        self.store = store
        self.job_id = job_id
        self.attempt = attempt
        self.ran = ran  # effects whose function ran in this call, over every attempt
        self.replayed = replayed  # effects the suspended attempt returned from the record

    async def resume(self, kind: Kind[D, Any, R], payload: Any, **options: Any) -> KindRun[R]:
        """Run the kind again after the wait (it may suspend again)."""
        return await run_kind(
            kind, payload, store=self.store, job_id=self.job_id, attempt=self.attempt, **options
        )


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
    state: dict[str, Any] = field(default_factory=dict)  # what it published, key to value


async def run_kind(
    kind: Kind[D, Any, R],
    payload: Any,
    *,
    deps: D = _UNSET,
    settings: Settings | None = None,
    crash_after_effect: int | None = None,
    crash_inside_effect: int | None = None,
    crash_inside_stream: int | None = None,
    store: EffectStore | None = None,
    job_id: uuid.UUID | None = None,
    attempt: int = 1,
    deadline: dt.datetime | None = None,
    deadline_seconds: float | None = None,
) -> KindRun[R]:
    """Run ``kind`` on ``payload`` (a dict or its model), with a replay after a
    simulated crash when one is asked for. Without ``deps``, the kind's factory builds
    them from ``settings`` (default: the environment's), and they are closed after.
    The kind's own exceptions (Retry, PermanentError, ...) propagate; a kind that waits
    raises KindSuspended (resume it on the same ``store`` and ``job_id``), its wait woken
    at the run's deadline at the latest. ``deadline`` or ``deadline_seconds`` (from the
    store's clock; default: the kind's) is fixed by the first run on a store; a run or
    attempt that reaches it raises KindDeadlinePassed, the job ended as the engine ends it."""
    store = store if store is not None else EffectStore()
    job_id = job_id or uuid.uuid4()
    parsed = kind.parse(payload)
    if not store.submitted:
        store.deadline = fix(store.clock, deadline, deadline_seconds, kind.deadline_seconds)
        store.submitted = True
        store.version = kind.version
    elif deadline is not None or deadline_seconds is not None:
        raise ValueError("the deadline is fixed by the first run on this store")
    if kind.on_version_change == "pin" and store.version != kind.version:
        # The worker hands such a job back for a worker that serves its version.
        raise ValueError(
            f"kind {kind.name!r} is pinned: this job started on version {store.version}, "
            f"not {kind.version}; resume it with that version"
        )
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
            "crash_inside_stream": crash_inside_stream,
        }
        while True:
            if store.deadline is not None and store.clock >= store.deadline:
                # The claim finds the job past its deadline: it ends, its code unrun.
                raise _ended(store, job_id, attempt, ran, [], unrun=True)
            ctx: MemoryContext[D] = MemoryContext(
                store=store,
                job_id=job_id,
                kind=kind.name,
                attempt=attempt,
                deps=deps,
                version=kind.version,
                **crash,
            )
            attempts += 1
            try:
                value = await kind.run(ctx, parsed)
            except SimulatedCrash as died:
                crashed_after = str(died)
                crash = {}  # the next attempt runs to its end
                attempt += 1
                continue
            except DeadlineStop:
                raise _ended(store, job_id, attempt, [*ran, *ctx.ran], ctx.replayed) from None
            except errors.Suspend as waits:
                raise KindSuspended(
                    bounded(waits.wait, store.deadline),
                    store=store,
                    job_id=job_id,
                    attempt=attempt,
                    ran=[*ran, *ctx.ran],
                    replayed=ctx.replayed,
                ) from None
            finally:
                ran.extend(ctx.ran)
            ctx._finished()
            result = kind.check_result(value)
            return KindRun(
                result=result,
                stored=kind.to_json(result),
                ran=ran,
                replayed=ctx.replayed,
                attempts=attempts,
                crashed_after=crashed_after,
                effects=dict(store.records),
                state=store.values,
            )
    finally:
        if owned:
            await close(deps)


def _ended(
    store: EffectStore,
    job_id: uuid.UUID,
    attempt: int,
    ran: list[str],
    replayed: list[str],
    *,
    unrun: bool = False,
) -> KindDeadlinePassed:
    """The job's end at its deadline: its unfinished children cancelled."""
    assert store.deadline is not None
    return KindDeadlinePassed(
        deadline=store.deadline,
        at=store.clock,
        store=store,
        job_id=job_id,
        attempt=attempt,
        ran=ran,
        replayed=replayed,
        cancelled_children=cancel_children(store.children),
        unrun=unrun,
    )
