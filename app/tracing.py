"""OpenTelemetry tracing: the tracer every layer starts its spans from, the process's
set-up, and a job's trace context as W3C ``traceparent`` text.

Without a configured SDK the OpenTelemetry API is a no-op, so code may start spans
unconditionally. ``configure`` installs the SDK (OTLP over HTTP, batched) only when
``OTEL_EXPORTER_OTLP_ENDPOINT`` or ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`` is set: without
one nothing of the SDK is imported and a span costs nothing.

A job's trace starts at the request that submitted it (joining the caller's trace when
it sent a ``traceparent`` header). Its context is kept on the job row
(``jobs.trace_context``) and rides on its messages (the ``traceparent`` message
attribute), so every attempt, after any crash, retry, wait or redrive, is a span of
that one trace.
"""

from __future__ import annotations

import contextlib
import os
import uuid
from collections.abc import Iterator, Mapping
from typing import Any
from urllib.parse import urlsplit

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from app import __version__, errors

tracer = trace.get_tracer("tasklease")

# The W3C header, and the SQS message attribute of the same name.
TRACEPARENT = "traceparent"
# Each process's service.name (the OpenTelemetry resource): API, worker or sweeper.
SERVICES = ("tasklease-api", "tasklease-worker", "tasklease-sweeper")
# The variables that turn the SDK on (either names where spans go).
ENDPOINT_VARS = ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT")
# Head-based sampling with every failed or dead-lettered attempt kept (app/trace_sampling.py).
SAMPLE_RATIO_VAR = "TASKLEASE_TRACE_SAMPLE_RATIO"
# How long a flush (the end of a Lambda invocation, a claim's lease span) may take.
FLUSH_MILLIS = 2000

_propagator = TraceContextTextMapPropagator()
_sdk: Any = None  # the SDK TracerProvider configure installed, when tracing is on
# TraceIdRatioBased's bound under TASKLEASE_TRACE_SAMPLE_RATIO; None: every trace sampled.
_sample_bound: int | None = None


def configure(service: str, environ: Mapping[str, str] | None = None) -> bool:
    """Install the SDK for this process as ``service`` when an OTLP endpoint is set;
    whether tracing is on. Called once per process (API, worker, Lambda handler init);
    later calls change nothing. A bad endpoint or protocol stops start-up, naming the
    variable (the SDK would only log it and drop every span)."""
    global _sdk
    env = os.environ if environ is None else environ
    if service not in SERVICES:
        raise ValueError(f"unknown service {service!r}")
    ratio = sample_ratio(env)  # a bad value stops start-up, tracing on or off
    if _sdk is not None or not any(env.get(v) for v in ENDPOINT_VARS):
        return _sdk is not None
    _check(env)
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    # OTEL_RESOURCE_ATTRIBUTES and OTEL_SERVICE_NAME still add to (or rename) these.
    resource = Resource.create(
        {"service.name": env.get("OTEL_SERVICE_NAME") or service, "service.version": __version__}
    )
    # Batched: spans are exported from a thread every OTEL_BSP_SCHEDULE_DELAY ms.
    batched = BatchSpanProcessor(OTLPSpanExporter())
    if ratio is None:
        provider = TracerProvider(resource=resource)  # OTEL_TRACES_SAMPLER's, if set
        provider.add_span_processor(batched)
    else:
        provider, _ = sampled_provider(ratio, batched, resource=resource)
    trace.set_tracer_provider(provider)
    _sdk = provider
    return True


def sample_ratio(env: Mapping[str, str]) -> float | None:
    """``TASKLEASE_TRACE_SAMPLE_RATIO``, the share of traces sampled at their head, or
    None when unset; not a number from 0 to 1, or set beside ``OTEL_TRACES_SAMPLER``: a
    ConfigError naming the variable."""
    text = env.get(SAMPLE_RATIO_VAR, "").strip()
    if not text:
        return None
    try:
        ratio = float(text)
    except ValueError:
        ratio = float("nan")
    if not 0 <= ratio <= 1:  # False for nan
        raise errors.ConfigError(f"{SAMPLE_RATIO_VAR}: a share of traces from 0 to 1, got {text!r}")
    if env.get("OTEL_TRACES_SAMPLER"):
        raise errors.ConfigError(
            f"{SAMPLE_RATIO_VAR}: set beside OTEL_TRACES_SAMPLER "
            f"({env['OTEL_TRACES_SAMPLER']!r}): set one of the two"
        )
    return ratio


def sampled_provider(ratio: float, out: Any, **provider_args: Any) -> tuple[Any, Any]:
    """An SDK TracerProvider that samples ``ratio`` of traces at their head and keeps
    every failed or dead-lettered attempt's spans (app/trace_sampling.py), exporting
    through the span processor ``out``, and its KeepFailed processor; from now on jobs
    that kept no trace context (``of_job``) are sampled by the same rule, on their id."""
    global _sample_bound
    from opentelemetry.sdk.trace import TracerProvider

    from app import trace_sampling

    provider = TracerProvider(sampler=trace_sampling.HeadSampler(ratio), **provider_args)
    keeper = trace_sampling.KeepFailed(out)
    provider.add_span_processor(keeper)
    _sample_bound = trace_sampling.bound_of(ratio)
    return provider, keeper


def _check(env: Mapping[str, str]) -> None:
    for name in ENDPOINT_VARS:
        value = env.get(name)
        if value and (
            urlsplit(value).scheme not in ("http", "https") or not urlsplit(value).netloc
        ):
            raise errors.ConfigError(f"{name}: {value!r} is not an http(s) URL")
    protocol = env.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL") or env.get(
        "OTEL_EXPORTER_OTLP_PROTOCOL"
    )
    if protocol and protocol != "http/protobuf":
        raise errors.ConfigError(
            f"OTEL_EXPORTER_OTLP_PROTOCOL: {protocol!r}: tasklease exports OTLP over HTTP "
            "(http/protobuf) only"
        )


def use(provider: Any | None) -> None:
    """Tests: the process's global provider is now ``provider`` (set by the caller: a test's
    SDK provider with an in-memory exporter), flushed and reported on as configure's;
    None: tracing is off again (the caller's provider gives no-op spans), and every
    trace sampled again."""
    global _sdk, _sample_bound
    _sdk = provider
    if provider is None:
        _sample_bound = None


def usage_attributes(model: str, input_tokens: int | None, output_tokens: int | None) -> None:
    """A model call's model and tokens on the current span, as OpenTelemetry's GenAI
    conventions name them (``gen_ai.response.model``, ``gen_ai.usage.*_tokens``)."""
    span = trace.get_current_span()
    span.set_attribute("gen_ai.response.model", model)
    for name, value in (("input_tokens", input_tokens), ("output_tokens", output_tokens)):
        if value is not None:
            span.set_attribute(f"gen_ai.usage.{name}", value)


def enabled() -> bool:
    """Whether spans are recorded and exported in this process."""
    return _sdk is not None


def flush(timeout_millis: int = FLUSH_MILLIS) -> None:
    """Export what is batched now (blocking): the end of a Lambda invocation, whose
    process may be frozen right after it. Nothing without the SDK."""
    if _sdk is not None:
        _sdk.force_flush(timeout_millis)


# --- a job's trace context --------------------------------------------------------


def traceparent() -> str | None:
    """The current span's context as W3C ``traceparent`` text, or None outside a span."""
    carrier: dict[str, str] = {}
    _propagator.inject(carrier)
    return carrier.get(TRACEPARENT)


def for_new_job() -> str | None:
    """The trace context a new job keeps: the current span's (the submitting request's,
    or the parent job's attempt's); None outside any span (then ``of_job`` names it)."""
    return traceparent()


def of_job(job_id: uuid.UUID) -> otel_context.Context:
    """The trace of a job that kept no context (written outside any span, or with tracing
    off): its id is the trace id, so every attempt still shares one trace, found by the
    job's id. The parent span id, derived from the id too, is never exported itself."""
    low = job_id.int & 0xFFFF_FFFF_FFFF_FFFF
    # Sampled, or under TASKLEASE_TRACE_SAMPLE_RATIO as TraceIdRatioBased decides on this
    # trace id: the same decision in every process.
    sampled = _sample_bound is None or low < _sample_bound
    parent = trace.SpanContext(
        trace_id=job_id.int,
        span_id=low or 1,
        is_remote=True,
        trace_flags=trace.TraceFlags(trace.TraceFlags.SAMPLED if sampled else 0),
    )
    return trace.set_span_in_context(trace.NonRecordingSpan(parent))


def context_of(text: str | None) -> otel_context.Context | None:
    """The context a ``traceparent`` text names, or None when it names none (absent or
    malformed: the SDK's propagator validates it)."""
    if not text:
        return None
    ctx = _propagator.extract({TRACEPARENT: text})
    return ctx if trace.get_current_span(ctx).get_span_context().is_valid else None


@contextlib.contextmanager
def request_span(
    name: str, route: str, headers: Mapping[str, str], **attributes: Any
) -> Iterator[trace.Span]:
    """A span ``name`` for work a request does, in the request's trace: a child of the
    server span FastAPI's own telemetry made (it joins the caller's trace from its
    ``traceparent`` header); where none is current (that telemetry off), a server span
    ``route`` of its own, in the caller's trace when its headers carry one."""
    if trace.get_current_span().get_span_context().is_valid:
        with tracer.start_as_current_span(name, attributes=attributes) as span:
            yield span
        return
    parent = _propagator.extract(dict(headers.items()))
    with tracer.start_as_current_span(
        route, context=parent, kind=trace.SpanKind.SERVER, attributes=attributes
    ) as span:
        yield span


def job_event(name: str, job_id: uuid.UUID, trace_context: str | None, **attributes: Any) -> None:
    """A short span in a job's trace for what happened to the job outside its attempts
    (a wake-up by a callback's answer, by a child's end), linked to the current span
    (the request's, the child's attempt)."""
    if _sdk is None:
        return
    parent = context_of(trace_context) or of_job(job_id)
    attributes = {"job.id": str(job_id), **attributes}
    current = trace.get_current_span().get_span_context()
    links = [trace.Link(current)] if current.is_valid else None
    tracer.start_span(name, context=parent, attributes=attributes, links=links).end()


def failed(span: trace.Span, exc: BaseException) -> None:
    """Record an error on a span: its exception event, and status ERROR."""
    span.record_exception(exc)
    span.set_status(trace.Status(trace.StatusCode.ERROR, f"{type(exc).__name__}: {exc}"[:500]))
