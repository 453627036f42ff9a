"""A job's trace, from the worker's side: each attempt is a span in the job's trace.

The trace context comes from the message's ``traceparent`` attribute, else from the job
row (``jobs.trace_context``, written at submission), else (a job written outside any span)
the trace whose id is the job's id. At the claim a short ``job.lease``
span is ended and exported at once: a SIGKILLed attempt's own span never ends, so never
leaves the process, but its lease span already did, and the trace of a job killed and
retried shows both attempts. The attempt span ``job.attempt <kind>`` carries the job's
attributes and its outcome; effects are its children (app/kinds/context.py); a wait
and a wake-up are its events.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator, Mapping
from typing import Any

from opentelemetry import trace

from app import tracing
from app.kinds.waits import Wait
from app.store.records import Job
from app.transport import codec

# What a claim that found the job in these states says on the attempt span.
_FOUND = {"waiting": "job.woken", "dead_lettered": "job.redriven", "stalled": "job.stalled"}


def attributes(job: Job, worker: str) -> dict[str, Any]:
    return {
        "job.id": str(job.id),
        "job.kind": job.kind,
        "job.attempt": job.attempt,
        "job.tenant": job.tenant,
        "job.worker": worker,
    }


@contextlib.contextmanager
def attempt(
    record: Mapping[str, Any], job: Job, worker: str, found: str | None
) -> Iterator[trace.Span]:
    """The attempt's span, current while the attempt runs, in the job's trace; the lease
    span ended (exported by ``export_claim``) before it starts."""
    parent = tracing.context_of(codec.attribute(record, codec.ATTR_TRACEPARENT))
    parent = parent or tracing.context_of(job.trace_context) or tracing.of_job(job.id)
    if not tracing.enabled():
        # Tracing off: the span the no-op tracer would give (the parent's own, which
        # records nothing), current as the attempt's, with no attributes or lease span
        # built for nobody (issue 37). A job submitted from the attempt keeps its trace.
        with trace.use_span(trace.get_current_span(parent), end_on_exit=False) as span:
            yield span
        return
    attrs = attributes(job, worker)
    if found is not None:
        attrs["job.claimed_from"] = found
    tracing.tracer.start_span("job.lease", context=parent, attributes=attrs).end()
    with tracing.tracer.start_as_current_span(
        f"job.attempt {job.kind}",
        context=parent,
        attributes=attrs,
        record_exception=False,
        set_status_on_exception=False,
    ) as span:
        if found in _FOUND:
            span.add_event(_FOUND[found], {"job.attempt": job.attempt})
        try:
            yield span
        except Exception as exc:  # the database or the queue down: the record is left
            outcome("error", exc)
            raise


# How long a claim waits for its lease span's export: a collector that is slow or down
# must not hold the job up (the span then goes with the next batch).
CLAIM_EXPORT_WAIT_SECONDS = 0.5


class ClaimExports:
    """Exports lease spans at the claim: one flush at a time (in a thread: the export is
    a blocking HTTP call); the claims that come while one runs share the next."""

    def __init__(self) -> None:
        self._running: asyncio.Future[None] | None = None
        self._next: asyncio.Future[None] | None = None

    async def export(self) -> None:
        """Export the lease spans ended so far, waiting a little at most, so a kill at any
        later instruction still leaves the attempt visible in the trace."""
        if not tracing.enabled():
            return
        if self._next is None:
            self._next = asyncio.ensure_future(self._flush(self._running))
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(asyncio.shield(self._next), CLAIM_EXPORT_WAIT_SECONDS)

    async def _flush(self, before: asyncio.Future[None] | None) -> None:
        if before is not None:
            await asyncio.wait([before])
        # From here on, a new claim's span may miss this flush: it queues the next one.
        self._running, self._next = self._next, None
        with contextlib.suppress(Exception):  # an export's failure is the SDK's to log
            await asyncio.to_thread(tracing.flush)


def outcome(value: str, exc: BaseException | None = None) -> None:
    """How the current attempt ended (``job.outcome``), and its error when it failed."""
    span = trace.get_current_span()
    span.set_attribute("job.outcome", value)
    if exc is not None:
        tracing.failed(span, exc)


def waiting(wait: Wait) -> None:
    """The attempt ends with the job waiting: an event on the attempt span."""
    attrs: dict[str, Any] = {"wait.kind": wait.kind, "wait.key": wait.key}
    if wait.wake_at is not None:
        attrs["wait.until"] = wait.wake_at.isoformat()
    trace.get_current_span().add_event("job.wait", attrs)
    outcome("waiting")
