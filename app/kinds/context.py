"""What a job kind's code sees: its job's ids and attempt, its dependencies,
``effect(key, fn)``, ``idempotency_key(key)``, a logger with the job's fields bound, and
the waits: ``sleep``, ``wait_for_callback``, ``spawn``, ``gather`` and ``receive``.

``JobContext`` is abstract: where an effect's result is recorded is the runner's
business (the worker's lease-fenced table in app/worker/context.py, or memory in
app/kinds/testing.py), through the hooks of app/kinds/hooks.py. Nothing of the lease or the database is reachable from here.
"""

from __future__ import annotations

import json
import logging
import uuid
from collections.abc import Awaitable, Callable, Mapping, MutableMapping
from typing import Any, Generic, TypeVar, overload

from app import errors, tracing
from app.kinds import generate as generating
from app.kinds import steps, threads
from app.kinds.generate import ModelCall, Produce, Usage
from app.kinds.output import MAX_NOTE_CHARS, Emitted, check_emitted
from app.kinds.state import checked as checked_state
from app.kinds.waiting import Waits
from app.settings import bounds
from app.storable import unstorable

D = TypeVar("D")
T = TypeVar("T")

MAX_EFFECT_KEY = bounds.MAX_EFFECT_KEY_CHARS


class JobLogger(logging.LoggerAdapter[logging.Logger]):
    """A logger that adds the job's fields to every record, beside the call's own extras."""

    def process(self, msg: Any, kwargs: MutableMapping[str, Any]) -> tuple[Any, Any]:
        kwargs["extra"] = {**(self.extra or {}), **(kwargs.get("extra") or {})}
        return msg, kwargs


class JobContext(Waits, Generic[D]):
    """One attempt of one job, as its kind's code sees it. ``D`` is the kind's deps type."""

    def __init__(
        self,
        *,
        job_id: uuid.UUID,
        kind: str,
        attempt: int,
        deps: D,
        recorded: Mapping[str, Any] | None = None,
        log_fields: Mapping[str, Any] | None = None,
        shapes: Mapping[str, str | None] | None = None,
        version: str | None = None,
        started_version: str | None = None,
    ) -> None:
        self.job_id = job_id
        self.kind = kind
        self.attempt = attempt
        self.deps = deps
        # The version of the kind's code running, and the one the job first started on.
        self.version = version
        self.started_version = started_version
        self._recorded: dict[str, Any] = dict(recorded or {})
        self._shapes: dict[str, str | None] = dict(shapes or {})  # recorded steps' shapes
        self._patches: dict[str, bool] = {}  # what patched() answered this run, by name
        # A divergence this run found: raised again at every later step and at the end,
        # so code that catches it (``except Exception``) cannot go on past it.
        self._diverged: errors.ReplayDiverged | None = None
        self._replayed: list[str] = []
        self._ran: list[str] = []
        self._used: set[str] = set()  # keys this run used: a key used twice is an error
        self._emitted: list[Emitted] = []
        self._receives: dict[str, int] = {}  # receives this run made, by topic
        fields = {"job_id": job_id, "kind": kind, "attempt": attempt, **(log_fields or {})}
        self.log = JobLogger(logging.getLogger(f"app.kinds.{kind}"), fields)

    @property
    def replayed(self) -> list[str]:
        """Effects this attempt returned from an earlier attempt's record, in order."""
        return list(self._replayed)

    @property
    def ran(self) -> list[str]:
        """Effects whose function this attempt called, in order."""
        return list(self._ran)

    def idempotency_key(self, key: str) -> str:
        """The key to hand to an outside system that honours one: f"{job_id}:{key}"."""
        return f"{self.job_id}:{key}"

    @overload
    async def effect(self, key: str, fn: Callable[[], Awaitable[T]]) -> T: ...

    @overload
    async def effect(self, key: str, fn: Callable[[], T]) -> T: ...

    async def effect(self, key: str, fn: Callable[[], Awaitable[T]] | Callable[[], T]) -> T:
        """Run ``fn`` once for this job, ever, and return its recorded (JSON) result.

        A result recorded by an earlier attempt is returned without calling ``fn``.
        Otherwise ``fn`` runs and its result is recorded; if another attempt recorded
        first, *its* result is returned. A crash between ``fn`` returning and the record
        is the one window this cannot close: pass ``ctx.idempotency_key(key)`` to outside
        systems that take one.

        ``fn`` is an ``async def`` function (awaited), or a plain one: that runs in a
        worker thread, so a blocking call does not hold the event loop, and an awaitable
        it returns (``lambda: extract(text)``) is awaited.
        """
        result: T = await self._step(key, fn, steps.EFFECT)
        return result

    async def _step(self, key: str, fn: Callable[[], Any], shape: str) -> Any:
        """``effect`` recorded as a step of ``shape`` (the waits' steps)."""
        what = f"{shape} {key!r}"

        async def plain() -> tuple[Any, None]:
            return await threads.call(what, fn), None

        return await self._spanned(key, plain, shape=shape)

    async def model_call(
        self, key: str, fn: ModelCall, *, budget: str | None = None, tokens: int = 0
    ) -> Any:
        """``effect`` for a model call: ``fn`` returns the answer and its ``Usage``, which
        is recorded with the answer (the job's tokens and cost; GET /v1/usage). ``fn`` is
        ``async def`` or plain, as ``effect``'s.

        ``budget`` ("provider/model") and ``tokens`` (its estimate): the call first
        reserves them under the model's and the tenant's budgets, and its usage settles
        them after (docs/explain/design.md#throttles); over a budget the job waits."""
        if budget is None:
            return await self._spanned(
                key, lambda: generating.answer_and_usage(key, fn), shape=steps.MODEL_CALL
            )

        async def budgeted() -> tuple[Any, Usage]:
            held = await self._reserve(budget, max(0, tokens))
            try:
                answer, usage = await generating.answer_and_usage(key, fn)
            except errors.Throttled:
                await self._settle(held, None)  # refused: the provider counted no tokens
                raise
            await self._settle(held, usage)
            return answer, usage

        return await self._spanned(key, budgeted, shape=steps.MODEL_CALL)

    async def generate(
        self, key: str, produce: Produce, *, budget: str | None = None, tokens: int = 0
    ) -> str:
        """A streamed model answer as an effect, continued (not restarted) after a crash
        from the chunks recorded: see app/kinds/generate.py. Returns the whole text.
        ``budget`` and ``tokens``: as ``model_call``'s."""
        return await generating.generate(self, key, produce, budget=budget, tokens=tokens)

    async def _spanned(
        self,
        key: str,
        fn: Callable[[], Awaitable[tuple[T, Usage | None]]],
        *,
        shape: str,
    ) -> T:
        """The key's checks and the effect's span around ``_effect``; a model call's span
        also carries OpenTelemetry's GenAI attributes (the operation, and once the call
        ran, the model and its tokens)."""
        if not key or len(key) > MAX_EFFECT_KEY:
            raise errors.PermanentError(
                f"effect key must be 1 to {MAX_EFFECT_KEY} characters: {key!r}"
            )
        if self._diverged is not None:
            raise self._diverged
        if key in self._used:
            # Replay matches steps by key: a second step under one key would replay the
            # first one's result instead of running.
            raise errors.PermanentError(f"key {key!r} used twice in one run of {self.kind}")
        self._used.add(key)
        # A span per effect, a child of the attempt's: replayed or run, and its error.
        attributes: dict[str, Any] = {"effect.key": key, "effect.replayed": key in self._recorded}
        if shape == steps.MODEL_CALL:
            attributes["gen_ai.operation.name"] = "chat"
        with tracing.tracer.start_as_current_span(
            f"effect {key}",
            attributes=attributes,
            record_exception=False,
            set_status_on_exception=False,
        ) as span:
            try:
                return await self._effect(key, fn, steps.shape_here(shape))
            except Exception as exc:
                tracing.failed(span, exc)
                raise

    async def _effect(
        self, key: str, fn: Callable[[], Awaitable[tuple[T, Usage | None]]], shape: str
    ) -> T:
        if key in self._recorded:
            try:
                steps.check_reached(
                    key,
                    self._shapes.get(key),
                    shape,
                    started=self.started_version,
                    running=self.version,
                )
            except errors.ReplayDiverged as diverged:
                self._diverged = diverged
                raise
            self._replayed.append(key)
            self.log.info("effect replayed", extra={"effect": key})
            return self._recorded[key]  # type: ignore[no-any-return]
        inside = steps.opened(key)
        try:
            result, usage = await fn()
        finally:
            steps.closed(inside)
        self._ran.append(key)
        if usage is not None:
            tracing.usage_attributes(usage.model, usage.input_tokens, usage.output_tokens)
        try:
            # The record holds JSON: what a replay returns is what this attempt returns.
            value = json.loads(json.dumps(result))
        except (TypeError, ValueError) as exc:
            raise errors.PermanentError(
                f"effect {key!r} returned a value that is not JSON"
            ) from exc
        stored = await self._record(key, len(self._recorded), value, usage, shape=shape)
        self._recorded[key] = stored
        self._shapes[key] = shape
        self._after_effect(key)
        return stored  # type: ignore[no-any-return]

    # --- versions ---------------------------------------------------------------

    async def patched(self, name: str) -> bool:
        """Whether this job takes the new path of patch ``name`` (``if await
        ctx.patched("x"): new() else: old()``): True for a job that reaches this point on
        code carrying the patch (a marker step ``patch:{name}`` is recorded, so a replay
        answers True again), False for a job that passed this point on code without it
        (it recorded steps beyond here and no marker). Lifecycle: docs/howto/kind-versions.md."""
        key = steps.PATCH + ":" + name
        if name in self._patches:
            return self._patches[name]
        # Any step recorded past here without the marker, one from before shapes were
        # recorded included: the job passed this point on code without the patch.
        passed = steps.unreached(self._recorded, self._shapes, self._used, unshaped=True)
        if key not in self._recorded and passed:
            self._patches[name] = False  # the job's record goes on past here without it
            return False
        await self._step(key, lambda: True, steps.PATCH)
        self._patches[name] = True
        return True

    def deprecate_patch(self, name: str) -> None:
        """Patch ``name``'s old path is gone: records nothing and returns nothing, so new
        jobs carry no marker; a job that recorded one replays without it (a marker is
        never a missed step). Remove the call once no job of the old code is waiting."""
        self._patches[name] = True

    def _unreached(self) -> list[str]:
        """Recorded steps this run has not reached (yet)."""
        return steps.unreached(self._recorded, self._shapes, self._used)

    def _finished(self) -> None:
        """The kind's code returned: ReplayDiverged if it left recorded steps unreached (or
        went on past a divergence it caught)."""
        if self._diverged is not None:
            raise self._diverged
        steps.check_finished(
            self._unreached(), self._shapes, started=self.started_version, running=self.version
        )

    # --- streamed output ----------------------------------------------------------

    async def progress(self, fraction: float | None = None, note: str | None = None) -> None:
        """Say how far the job is (``fraction``, 0 to 1) and what it is doing (``note``).
        Readers of the job's stream see it as it happens. Writes are batched (not a round
        trip per call) and fenced by the lease: a zombie's progress is refused."""
        if fraction is not None and not (
            isinstance(fraction, int | float) and 0.0 <= float(fraction) <= 1.0
        ):
            raise errors.PermanentError(f"progress: fraction must be 0 to 1, not {fraction!r}")
        if fraction is not None and isinstance(fraction, bool):
            raise errors.PermanentError(f"progress: fraction must be 0 to 1, not {fraction!r}")
        if note is not None and (
            not isinstance(note, str) or len(note) > MAX_NOTE_CHARS or unstorable(note)
        ):
            raise errors.PermanentError(
                f"progress: note must be text of {MAX_NOTE_CHARS} chars or fewer"
            )
        data = {"fraction": None if fraction is None else float(fraction), "note": note}
        await self._output(Emitted(self.now(), "progress", data))

    async def emit(self, data: Any) -> None:
        """Stream ``data`` (a JSON value, a piece of output) to the job's readers, as
        ``progress`` does: batched, fenced, in order."""
        await self._output(Emitted(self.now(), "output", check_emitted(data)))

    @property
    def emitted(self) -> list[Emitted]:
        """What this attempt emitted (progress, output, chunks), in order."""
        return list(self._emitted)

    async def _output(self, item: Emitted) -> None:
        """Keep ``item`` for the job's stream; runners write it where readers find it."""
        self._emitted.append(item)

    # --- published state -------------------------------------------------------

    async def set_state(self, key: str, value: Any) -> None:
        """Publish ``value`` (a small JSON value) under ``key``: callers read it with
        ``GET /v1/jobs/{id}/state`` and see it change on the job's stream. Written at once,
        after what the job emitted before, and fenced by the lease. The last write wins;
        writing the value the key holds changes nothing (a replay after a crash that
        publishes what the crashed attempt published is no change). A bad key or value,
        or a new key past the job's keys (app/settings/bounds.py), is a PermanentError and
        writes nothing."""
        await self._set_state(key, checked_state(key, value))

    async def _set_state(self, key: str, value: Any) -> None:
        """Write ``value`` (checked) under ``key`` where readers find it."""
        raise errors.PermanentError(f"{type(self).__name__} does not publish state")
