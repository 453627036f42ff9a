"""TASKLEASE_TRACE_SAMPLE_RATIO (app/tracing.py) and the sampler and span processor it
installs (app/trace_sampling.py), on a provider of the test's own (not the process's
global one) with the in-memory exporter: a bad ratio stops start-up naming the variable;
unsampled spans are recorded with their attributes, held only while an attempt of their
trace is open, exported when it fails, let go when it does not; the bounds hold."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from app import errors, trace_sampling, tracing

pytestmark = pytest.mark.unit

VAR = "TASKLEASE_TRACE_SAMPLE_RATIO"
Setup = tuple[trace.Tracer, trace_sampling.KeepFailed, InMemorySpanExporter]


def test_the_ratio_is_read_and_checked() -> None:
    assert tracing.sample_ratio({}) is None
    assert tracing.sample_ratio({VAR: " "}) is None
    assert tracing.sample_ratio({VAR: "0.25"}) == 0.25
    assert tracing.sample_ratio({VAR: "0"}) == 0.0
    for bad in ("a quarter", "1.5", "-0.1", "nan", "inf"):
        with pytest.raises(errors.ConfigError, match=f"^{VAR}: a share of traces from 0 to 1"):
            tracing.sample_ratio({VAR: bad})
    with pytest.raises(errors.ConfigError, match=f"^{VAR}: set beside OTEL_TRACES_SAMPLER"):
        tracing.sample_ratio({VAR: "0.1", "OTEL_TRACES_SAMPLER": "always_on"})


def test_a_bad_ratio_stops_start_up_even_with_tracing_off() -> None:
    with pytest.raises(errors.ConfigError, match=VAR):
        tracing.configure("tasklease-worker", {VAR: "2"})
    assert not tracing.enabled()  # nothing installed


@pytest.fixture
def setup() -> Iterator[Setup]:
    exporter = InMemorySpanExporter()
    keeper = trace_sampling.KeepFailed(SimpleSpanProcessor(exporter), max_traces=2, max_spans=3)
    provider = TracerProvider(sampler=trace_sampling.HeadSampler(0.0))
    provider.add_span_processor(keeper)
    yield provider.get_tracer("test"), keeper, exporter
    provider.shutdown()


def attempt(tracer: trace.Tracer, outcome: str, effects: int = 1) -> None:
    """A claim as the worker makes it: its lease span, then the attempt with effects."""
    root = tracer.start_span("job.submit")  # the head: not sampled at ratio 0
    ctx = trace.set_span_in_context(root)
    tracer.start_span("job.lease", context=ctx, attributes={"job.id": "j"}).end()
    with tracer.start_as_current_span(
        "job.attempt k", context=ctx, attributes={"job.id": "j"}
    ) as span:
        for i in range(effects):
            tracer.start_span(f"effect e{i}").end()
        span.set_attribute("job.outcome", outcome)
    root.end()


def test_an_attempt_that_ends_well_exports_nothing_and_holds_nothing(setup: Setup) -> None:
    tracer, keeper, exporter = setup
    for outcome in ("succeeded", "waiting", "handed_back", "cancelled"):
        attempt(tracer, outcome)
    assert exporter.get_finished_spans() == ()
    assert keeper.held_traces() == 0 and keeper.kept_traces == 0


@pytest.mark.parametrize("outcome", ["retrying", "dead_lettered", "error"])
def test_a_failed_attempt_is_exported_whole_and_marked(setup: Setup, outcome: str) -> None:
    tracer, keeper, exporter = setup
    attempt(tracer, outcome)
    got = {s.name: s for s in exporter.get_finished_spans()}
    # not job.submit: it is no claim's or attempt's (the API's side, let go)
    assert set(got) == {"job.lease", "effect e0", "job.attempt k"}
    for s in got.values():
        assert s.context is not None and s.context.trace_flags.sampled
        assert (s.attributes or {})[trace_sampling.KEPT_ATTRIBUTE] == "failed"
    # recorded unsampled, the spans kept the attributes they started with
    assert (got["job.attempt k"].attributes or {})["job.id"] == "j"
    assert (got["job.attempt k"].attributes or {})["job.outcome"] == outcome
    assert keeper.kept_traces == 1 and keeper.held_traces() == 0


def test_a_status_error_is_kept_whatever_the_outcome(setup: Setup) -> None:
    tracer, keeper, exporter = setup
    with tracer.start_as_current_span("job.attempt k") as span:
        span.set_status(trace.Status(trace.StatusCode.ERROR, "boom"))
    assert [s.name for s in exporter.get_finished_spans()] == ["job.attempt k"]
    assert keeper.kept_traces == 1


def test_the_bounds_hold(setup: Setup) -> None:
    tracer, keeper, exporter = setup
    # Three attempts open at once, two traces held at most: the oldest is let go.
    opened = [tracer.start_span("job.attempt k") for _ in range(3)]
    assert keeper.held_traces() == 2 and keeper.evicted_traces == 1
    for s in opened:
        s.set_attribute("job.outcome", "dead_lettered")
        s.end()
    assert len(exporter.get_finished_spans()) == 2  # the evicted trace's attempt is gone
    exporter.clear()
    # Three spans a trace at most; the attempt's own is kept beyond that.
    attempt(tracer, "dead_lettered", effects=5)
    names = [s.name for s in exporter.get_finished_spans()]
    assert names == ["job.lease", "effect e0", "effect e1", "job.attempt k"]
    assert keeper.dropped_spans == 3
    assert keeper.held_traces() == 0


def test_a_sampled_trace_is_exported_as_usual_and_not_marked() -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider(sampler=trace_sampling.HeadSampler(1.0))
    provider.add_span_processor(trace_sampling.KeepFailed(SimpleSpanProcessor(exporter)))
    tracer = provider.get_tracer("test")
    attempt(tracer, "succeeded")
    spans = exporter.get_finished_spans()
    assert [s.name for s in spans] == ["job.lease", "effect e0", "job.attempt k", "job.submit"]
    assert all(trace_sampling.KEPT_ATTRIBUTE not in (s.attributes or {}) for s in spans)


def test_a_job_without_context_is_sampled_by_its_id_under_the_ratio() -> None:
    low, high = uuid.UUID(int=1), uuid.UUID(int=(1 << 64) - 1)
    try:
        tracing.sampled_provider(0.5, SimpleSpanProcessor(InMemorySpanExporter()))
        flags = [
            trace.get_current_span(tracing.of_job(j)).get_span_context().trace_flags.sampled
            for j in (low, high)
        ]
        assert flags == [True, False]  # TraceIdRatioBased's rule on the id's low 64 bits
    finally:
        tracing.use(None)  # every trace sampled again
    assert trace.get_current_span(tracing.of_job(high)).get_span_context().trace_flags.sampled
