"""Head-based sampling with every failed or dead-lettered attempt kept
(TASKLEASE_TRACE_SAMPLE_RATIO, app/trace_sampling.py), on real parts: the provider
``tracing.sampled_provider`` builds (the one ``configure`` installs) with the in-memory
exporter behind it, and a ratio of 0, so no trace is sampled at its head. A job whose
attempts succeed leaves nothing; an attempt that fails or dead-letters is exported whole
(its lease, itself, its effects), marked kept; nothing stays held afterwards."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from app import trace_sampling, tracing
from tests.conftest import Stack, job_row
from tests.helpers import engine_for, handle_and_ack, receive_records
from tests.traced import (
    _SWITCH,
    CALLER_TRACE,
    children_of,
    named,
    run_to_the_end,
    trace_id,
)

pytestmark = pytest.mark.integration

# The caller's trace, not sampled (flags 00): the head's decision the job follows.
UNSAMPLED_CALLER = f"00-{CALLER_TRACE}-b7ad6b7169203331-00"


@pytest.fixture
def keeper(spans: InMemorySpanExporter) -> Iterator[trace_sampling.KeepFailed]:
    before = _SWITCH.sdk
    provider, kept = tracing.sampled_provider(0.0, SimpleSpanProcessor(spans))
    _SWITCH.sdk = provider
    try:
        yield kept
    finally:
        _SWITCH.sdk = before  # the spans fixture then turns tracing off (and sampling)


def kept_mark(span: ReadableSpan) -> Any:
    return (span.attributes or {}).get(trace_sampling.KEPT_ATTRIBUTE)


def test_a_succeeding_job_under_ratio_zero_leaves_nothing(
    stack: Stack,
    sql: Any,
    spans: InMemorySpanExporter,
    keeper: trace_sampling.KeepFailed,
) -> None:
    run_to_the_end(stack, sql, "demo.sleep", {"steps": 2})
    assert spans.get_finished_spans() == ()
    assert keeper.held_traces() == 0
    assert keeper.kept_traces == 0


def test_a_retried_attempt_is_kept_and_the_attempt_that_succeeded_is_not(
    stack: Stack,
    sql: Any,
    spans: InMemorySpanExporter,
    keeper: trace_sampling.KeepFailed,
) -> None:
    # Submitted outside any span: its trace is its job id's, sampled by the same ratio.
    run_to_the_end(stack, sql, "demo.flaky", {"fail_attempts": 1})
    (attempt,) = named(spans, "job.attempt demo.flaky")
    assert (attempt.attributes or {})["job.attempt"] == 1
    assert (attempt.attributes or {})["job.outcome"] == "retrying"
    assert attempt.status.status_code is trace.StatusCode.ERROR
    assert [e.name for e in attempt.events] == ["exception"]
    (lease,) = named(spans, "job.lease")  # attempt 2's lease was let go with it
    assert (lease.attributes or {})["job.attempt"] == 1
    assert {kept_mark(s) for s in spans.get_finished_spans()} == {"failed"}
    assert keeper.kept_traces == 1
    assert keeper.held_traces() == 0


def test_a_dead_lettered_job_of_an_unsampled_trace_keeps_its_attempt_and_effects(
    stack: Stack,
    api: Any,
    sql: Any,
    spans: InMemorySpanExporter,
    keeper: trace_sampling.KeepFailed,
) -> None:
    resp = api.post(
        "/v1/jobs",
        json={"kind": "demo.sleep", "payload": {"steps": 2, "fail_at": 1}},
        headers={"traceparent": UNSAMPLED_CALLER},
    )
    assert resp.status_code == 202, resp.text
    job_id = resp.json()["id"]
    # The head's decision rides on the job: its context says "not sampled"...
    assert job_row(sql, job_id)["trace_context"].endswith("-00")
    # ...and the API's spans (recorded, unsampled, no attempt here) were let go.
    assert spans.get_finished_spans() == ()

    async def run() -> None:
        async with engine_for(stack.settings) as engine:
            await handle_and_ack(engine, await receive_records(engine))

    asyncio.run(run())
    assert job_row(sql, job_id)["state"] == "dead_lettered"
    (attempt,) = named(spans, "job.attempt demo.sleep")
    assert trace_id(attempt) == CALLER_TRACE
    assert (attempt.attributes or {})["job.id"] == job_id
    assert (attempt.attributes or {})["job.outcome"] == "dead_lettered"
    assert kept_mark(attempt) == "failed"
    assert attempt.context is not None and attempt.context.trace_flags.sampled
    effects = sorted(children_of(spans, attempt), key=lambda s: s.start_time or 0)
    # step-0 ran; step-1 raised before its effect (demo.sleep's fail_at)
    assert [e.name for e in effects] == ["effect step-0"]
    assert attempt.status.status_code is trace.StatusCode.ERROR
    assert len(named(spans, "job.lease")) == 1
    assert keeper.held_traces() == 0
