"""The trace tests' SDK provider and helpers (tests/integration/test_traces*.py): spans
collected by the SDK's InMemorySpanExporter. OpenTelemetry allows one global provider per
process, so it is installed once behind a switch, and switched off after each test, so the
other tests in the session run with tracing off as they expect. Shared from here, not
from one test module, which pytest and an importer would load as two modules (two
switches, and the second refused as a global provider)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from app import tracing
from tests.conftest import Stack, job_row
from tests.helpers import drain, engine_for, submit

CALLER_TRACE = "0af7651916cd43dd8448eb211c80319c"
CALLER_PARENT = f"00-{CALLER_TRACE}-b7ad6b7169203331-01"


class _Switched(trace.Tracer):
    """The SDK's tracer while the switch is on (from the switch's SDK provider of the
    moment: test_traces_sampling.py swaps in a sampling one), the no-op one while off."""

    def __init__(self, switch: _Switch, args: Any, kwargs: Any) -> None:
        self._switch, self._args, self._kwargs = switch, args, kwargs

    def _now(self) -> trace.Tracer:
        if not self._switch.on:
            return trace.NoOpTracer()
        return self._switch.sdk.get_tracer(*self._args, **self._kwargs)

    def start_span(self, *args: Any, **kwargs: Any) -> trace.Span:
        return self._now().start_span(*args, **kwargs)

    def start_as_current_span(self, *args: Any, **kwargs: Any) -> Any:
        return self._now().start_as_current_span(*args, **kwargs)


class _Switch(trace.TracerProvider):
    def __init__(self) -> None:
        self.exporter = InMemorySpanExporter()
        self.sdk: TracerProvider = TracerProvider()
        self.sdk.add_span_processor(SimpleSpanProcessor(self.exporter))
        self.on = False

    def get_tracer(self, *args: Any, **kwargs: Any) -> trace.Tracer:
        return _Switched(self, args, kwargs)

    def force_flush(self, timeout_millis: int = 0) -> bool:
        return self.sdk.force_flush(timeout_millis)


_SWITCH = _Switch()


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    if not isinstance(trace.get_tracer_provider(), _Switch):
        trace.set_tracer_provider(_SWITCH)
    _SWITCH.on = True
    tracing.use(_SWITCH)
    try:
        yield _SWITCH.exporter
    finally:
        _SWITCH.on = False
        tracing.use(None)
        _SWITCH.exporter.clear()


def named(spans: InMemorySpanExporter, prefix: str) -> list[ReadableSpan]:
    found = [s for s in spans.get_finished_spans() if s.name.startswith(prefix)]
    return sorted(found, key=lambda s: s.start_time or 0)


def trace_id(span: ReadableSpan) -> str:
    assert span.context is not None
    return f"{span.context.trace_id:032x}"


def children_of(spans: InMemorySpanExporter, parent: ReadableSpan) -> list[ReadableSpan]:
    assert parent.context is not None
    return [
        s
        for s in spans.get_finished_spans()
        if s.parent is not None and s.parent.span_id == parent.context.span_id
    ]


def run_to_the_end(stack: Stack, sql: Any, kind: str, payload: dict[str, Any]) -> Any:
    """Submit a job (outside any span: it keeps no trace context) and run it in this
    process until it succeeds."""

    async def run() -> Any:
        async with engine_for(stack.settings) as engine:
            job_id = await submit(engine, kind, payload)
            await drain(engine, sql, [job_id])
            return job_id

    job_id = asyncio.run(run())
    assert job_row(sql, job_id)["state"] == "succeeded"
    return job_id
