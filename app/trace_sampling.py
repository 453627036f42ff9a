"""Head-based sampling of traces that still keeps every failed or dead-lettered attempt
(``TASKLEASE_TRACE_SAMPLE_RATIO``, read by app/tracing.py): imported by ``configure`` only
when tracing is on and the ratio is set.

The head decision is made once per trace, where it starts (the request that submitted
the job): ``ParentBased(TraceIdRatioBased(ratio))``, so every span of a job's trace, in
every process, follows the submission's decision (the ``traceparent`` flag on the job row
and its messages). A trace the head did not sample is still *recorded* in this process
(``RECORD_ONLY``: spans are built, never exported by themselves). ``KeepFailed`` holds the
recorded spans of each unsampled trace that has a job's claim or attempt open in this
process (its ``job.lease`` span, the ``job.attempt <kind>`` span, their effects): when an
attempt ends failed, retrying, dead-lettered or with an error, those spans go to the
exporter, marked ``tasklease.sampling.kept``; when it ends otherwise they are let go.
Memory is bounded: at most ``MAX_TRACES`` traces held (the oldest let go first) and
``MAX_SPANS_PER_TRACE`` spans each (later ones dropped, the attempt's own kept); spans of traces with no attempt
open here (an API request's, a wake-up's outside an attempt) are never held.

What a kept failure's trace lacks: the spans other processes recorded and let go (the
API's request and submit spans, earlier attempts' on other workers or invocations that
succeeded or waited), and an attempt killed in an unsampled trace (its process died
holding it). The failing attempt itself, its lease and its effects are whole.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, Span, SpanProcessor
from opentelemetry.sdk.trace.sampling import (
    Decision,
    ParentBased,
    Sampler,
    SamplingResult,
    TraceIdRatioBased,
)
from opentelemetry.trace import Link, SpanKind
from opentelemetry.trace.span import TraceState
from opentelemetry.util.types import Attributes

# An attempt that ends so has its trace's spans kept (job.outcome, app/worker/traces.py):
# "retrying" is a failed attempt with attempts left; a status ERROR is kept too.
KEEP_OUTCOMES = frozenset({"failed", "retrying", "dead_lettered", "error"})
KEPT_ATTRIBUTE = "tasklease.sampling.kept"
MAX_TRACES = 256
MAX_SPANS_PER_TRACE = 128
LEASE = "job.lease"
ATTEMPT = "job.attempt "


def bound_of(ratio: float) -> int:
    """The bound ``TraceIdRatioBased`` compares a trace id's low 64 bits with."""
    return TraceIdRatioBased.get_bound_for_rate(ratio)


class HeadSampler(Sampler):
    """``ParentBased(TraceIdRatioBased(ratio))``, except that what it would drop is
    recorded (``RECORD_ONLY``, unsampled: never exported by the batch processor) so that
    ``KeepFailed`` can keep it."""

    def __init__(self, ratio: float) -> None:
        self.ratio = ratio
        self._head = ParentBased(TraceIdRatioBased(ratio))

    def should_sample(
        self,
        parent_context: otel_context.Context | None,
        trace_id: int,
        name: str,
        kind: SpanKind | None = None,
        attributes: Attributes = None,
        links: Sequence[Link] | None = None,
        trace_state: TraceState | None = None,
    ) -> SamplingResult:
        result = self._head.should_sample(
            parent_context, trace_id, name, kind, attributes, links, trace_state
        )
        if result.decision is not Decision.DROP:
            return result
        # The span's own attributes: a dropped result carries none.
        return SamplingResult(Decision.RECORD_ONLY, attributes, result.trace_state)

    def get_description(self) -> str:
        return f"KeepFailed{{ParentBased{{root:TraceIdRatioBased{{{self.ratio}}}}}}}"


@dataclass
class _Held:
    spans: list[ReadableSpan] = field(default_factory=list)
    open_attempts: int = 0


class KeepFailed(SpanProcessor):
    """Sampled spans to ``out`` (the batch processor) as usual; an unsampled trace's spans
    held while a claim or attempt of it is open here, and sent to ``out`` (as sampled,
    marked ``tasklease.sampling.kept``) when an attempt ends failed or dead-lettered."""

    def __init__(
        self,
        out: SpanProcessor,
        max_traces: int = MAX_TRACES,
        max_spans: int = MAX_SPANS_PER_TRACE,
    ) -> None:
        self._out = out
        self._max_traces = max_traces
        self._max_spans = max_spans
        self._held: OrderedDict[int, _Held] = OrderedDict()
        self._lock = threading.Lock()
        self.kept_traces = 0
        self.evicted_traces = 0
        self.dropped_spans = 0

    def held_traces(self) -> int:
        with self._lock:
            return len(self._held)

    def on_start(self, span: Span, parent_context: otel_context.Context | None = None) -> None:
        self._out.on_start(span, parent_context)
        ctx = span.get_span_context()
        if ctx.trace_flags.sampled or not span.name.startswith(ATTEMPT):
            return
        with self._lock:
            self._hold(ctx.trace_id).open_attempts += 1

    def on_end(self, span: ReadableSpan) -> None:
        ctx = span.context
        if ctx is None or ctx.trace_flags.sampled:
            self._out.on_end(span)
            return
        kept: list[ReadableSpan] = []
        with self._lock:
            held = self._hold(ctx.trace_id) if span.name == LEASE else self._held.get(ctx.trace_id)
            if held is None:
                return  # no claim or attempt of this trace here: let go, as unsampled
            # The attempt's own span is always held: the one a kept trace must show.
            if len(held.spans) < self._max_spans or span.name.startswith(ATTEMPT):
                held.spans.append(span)
            else:
                self.dropped_spans += 1
            if span.name.startswith(ATTEMPT):
                held.open_attempts -= 1
                if _failed(span):
                    kept, held.spans = held.spans, []
                    self.kept_traces += 1
                if held.open_attempts <= 0:
                    del self._held[ctx.trace_id]
        for s in kept:
            self._out.on_end(_as_kept(s))

    def _hold(self, trace_id: int) -> _Held:
        held = self._held.get(trace_id)
        if held is None:
            held = self._held[trace_id] = _Held()
            while len(self._held) > self._max_traces:
                self._held.popitem(last=False)
                self.evicted_traces += 1
        else:
            self._held.move_to_end(trace_id)
        return held

    def shutdown(self) -> None:
        self._out.shutdown()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return self._out.force_flush(timeout_millis)


def _failed(span: ReadableSpan) -> bool:
    outcome = (span.attributes or {}).get("job.outcome")
    return outcome in KEEP_OUTCOMES or span.status.status_code is trace.StatusCode.ERROR


def _as_kept(span: ReadableSpan) -> ReadableSpan:
    """The span as a sampled one (the batch processor exports only those), marked kept."""
    ctx = span.context
    assert ctx is not None
    sampled = trace.SpanContext(
        ctx.trace_id,
        ctx.span_id,
        ctx.is_remote,
        trace.TraceFlags(trace.TraceFlags.SAMPLED),
        ctx.trace_state,
    )
    return ReadableSpan(
        name=span.name,
        context=sampled,
        parent=span.parent,
        resource=span.resource,
        attributes={**(span.attributes or {}), KEPT_ATTRIBUTE: "failed"},
        events=span.events,
        links=span.links,
        kind=span.kind,
        status=span.status,
        start_time=span.start_time,
        end_time=span.end_time,
        instrumentation_scope=span.instrumentation_scope,
    )
