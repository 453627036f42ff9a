"""One trace per job, in this process: the API's submit span, the job row's trace context,
the ``traceparent`` message attribute, an attempt span per attempt (a retry and a wake-up
are two attempts of one trace), effect spans as their children, waits as events.

Spans are collected by the SDK's InMemorySpanExporter behind tests/traced.py's switch."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from app import tracing
from app.transport import codec
from examples import research_agent
from tasklease.fakemodel import serve_in_thread
from tasklease.testing import run_kind
from tests.conftest import Stack, job_row
from tests.helpers import engine_for, handle_and_ack, receive_records
from tests.integration.test_api_waits import token_of
from tests.traced import (
    CALLER_PARENT,
    CALLER_TRACE,
    children_of,
    named,
    run_to_the_end,
    trace_id,
)
from tests.unit.test_pydantic_ai import QUESTION, STEPS, deps_for

pytestmark = pytest.mark.integration


def test_a_job_joins_the_callers_trace_and_its_message_carries_it(
    stack: Stack, api: Any, sql: Any, spans: InMemorySpanExporter
) -> None:
    resp = api.post(
        "/v1/jobs",
        json={"kind": "demo.sleep", "payload": {"steps": 2}},
        headers={"traceparent": CALLER_PARENT},
    )
    assert resp.status_code == 202, resp.text
    job_id = resp.json()["id"]
    (server,) = [s for s in spans.get_finished_spans() if s.kind is trace.SpanKind.SERVER]
    assert server.name == "POST /v1/jobs"
    assert trace_id(server) == CALLER_TRACE
    assert server.parent is not None and server.parent.span_id == 0xB7AD6B7169203331
    (submit_span,) = named(spans, "job.submit")
    assert trace_id(submit_span) == CALLER_TRACE
    stored = job_row(sql, job_id)["trace_context"]
    assert stored.split("-")[1] == CALLER_TRACE
    assert stored.split("-")[2] == f"{submit_span.context.span_id:016x}"

    async def run() -> list[dict[str, Any]]:
        async with engine_for(stack.settings) as engine:
            records = await receive_records(engine)
            await handle_and_ack(engine, records)
            return records

    records = asyncio.run(run())
    assert [codec.attribute(r, "traceparent") for r in records] == [stored]
    (attempt,) = named(spans, "job.attempt demo.sleep")
    assert trace_id(attempt) == CALLER_TRACE
    assert attempt.parent is not None
    assert attempt.parent.span_id == submit_span.context.span_id
    assert attempt.attributes is not None
    assert attempt.attributes["job.id"] == job_id
    assert attempt.attributes["job.attempt"] == 1
    assert attempt.attributes["job.outcome"] == "succeeded"
    assert attempt.attributes["job.worker"] == stack.settings.worker_id
    (lease,) = named(spans, "job.lease")
    assert trace_id(lease) == CALLER_TRACE
    effects = sorted(children_of(spans, attempt), key=lambda s: s.start_time or 0)
    assert [(e.name, (e.attributes or {})["effect.replayed"]) for e in effects] == [
        ("effect step-0", False),
        ("effect step-1", False),
    ]


def test_a_retry_is_a_second_attempt_of_the_same_trace_with_the_error_on_the_first(
    stack: Stack, sql: Any, spans: InMemorySpanExporter
) -> None:
    job_id = run_to_the_end(stack, sql, "demo.flaky", {"fail_attempts": 1})
    first, second = named(spans, "job.attempt demo.flaky")
    assert trace_id(first) == trace_id(second)
    # Submitted outside any span: the job kept no context; its id is its trace's id.
    assert job_row(sql, job_id)["trace_context"] is None
    assert trace_id(first) == uuid.UUID(str(job_id)).hex
    assert [(s.attributes or {})["job.attempt"] for s in (first, second)] == [1, 2]
    assert [(s.attributes or {})["job.outcome"] for s in (first, second)] == [
        "retrying",
        "succeeded",
    ]
    assert first.status.status_code is trace.StatusCode.ERROR
    assert [e.name for e in first.events] == ["exception"]
    assert "fails on purpose" in str((first.events[0].attributes or {})["exception.message"])
    assert second.status.status_code is not trace.StatusCode.ERROR


def test_a_wait_and_its_wake_up_are_events_and_the_replayed_effect_says_so(
    stack: Stack, sql: Any, spans: InMemorySpanExporter
) -> None:
    run_to_the_end(stack, sql, "demo.nap", {"seconds": 1})
    slept, woke = named(spans, "job.attempt demo.nap")
    assert trace_id(slept) == trace_id(woke)
    assert (slept.attributes or {})["job.outcome"] == "waiting"
    (wait,) = [e for e in slept.events if e.name == "job.wait"]
    assert (wait.attributes or {})["wait.kind"] == "timer"
    assert (wait.attributes or {})["wait.key"] == "nap-0"
    assert [e.name for e in woke.events] == ["job.woken"]
    replayed = {s.name: (s.attributes or {})["effect.replayed"] for s in children_of(spans, woke)}
    assert replayed == {"effect sleep:nap-0": True, "effect woke-0": False}


def test_a_spawned_child_continues_its_parents_trace(
    stack: Stack, sql: Any, spans: InMemorySpanExporter
) -> None:
    job_id = run_to_the_end(stack, sql, "demo.fanout", {"children": 2})
    parent_trace = uuid.UUID(str(job_id)).hex  # submitted outside any span
    children = sql.execute("SELECT trace_context FROM jobs WHERE parent_id = %s", (job_id,))
    assert {r["trace_context"].split("-")[1] for r in children.fetchall()} == {parent_trace}
    attempts = named(spans, "job.attempt")
    assert {a.name for a in attempts} == {"job.attempt demo.fanout", "job.attempt demo.nap"}
    assert {trace_id(a) for a in attempts} == {parent_trace}
    # The spawn effect ran once (the gather's wake-up replays it); the child's attempt
    # hangs under the span that ran it.
    spawns = named(spans, "effect spawn:child-0")
    assert [(s.attributes or {})["effect.replayed"] for s in spawns] == [False, True]
    kids = [
        a
        for a in attempts
        if a.parent is not None and a.parent.span_id == spawns[0].context.span_id
    ]
    assert [k.name for k in kids] == ["job.attempt demo.nap"]
    # The last child's end woke the parent: a short span in the parent's trace.
    assert {trace_id(w) for w in named(spans, "job.wake children")} == {parent_trace}


def test_a_callback_answered_through_the_api_wakes_the_job_in_its_trace(
    stack: Stack, api: Any, sql: Any, spans: InMemorySpanExporter
) -> None:
    resp = api.post(
        "/v1/jobs",
        json={"kind": "demo.approval", "payload": {}},
        headers={"traceparent": CALLER_PARENT},
    )
    job_id = resp.json()["id"]

    async def handle_all() -> None:
        async with engine_for(stack.settings) as engine:
            await handle_and_ack(engine, await receive_records(engine))

    asyncio.run(handle_all())
    assert job_row(sql, job_id)["state"] == "waiting"
    answered = api.post(f"/v1/callbacks/{token_of(stack, job_id)}", json={"result": "yes"})
    assert answered.status_code == 200, answered.text
    (wake,) = named(spans, "job.wake callback")
    assert trace_id(wake) == CALLER_TRACE
    assert (wake.attributes or {})["callback.key"] == "approve"
    # Linked to the answering request's own trace (a request without a traceparent).
    (answer_server,) = [s for s in named(spans, "POST /v1/callbacks") if s.parent is None]
    assert [link.context.trace_id for link in wake.links] == [answer_server.context.trace_id]
    records = asyncio.run(run_records(stack))
    assert [codec.attribute(r, "traceparent") for r in records] == [
        job_row(sql, job_id)["trace_context"]
    ]


async def run_records(stack: Stack) -> list[dict[str, Any]]:
    async with engine_for(stack.settings) as engine:
        return await receive_records(engine)


def test_with_tracing_off_nothing_is_kept_or_sent(stack: Stack, api: Any, sql: Any) -> None:
    """The default: no SDK, no trace context on the row or the message (zero cost)."""
    resp = api.post("/v1/jobs", json={"kind": "demo.noop", "payload": {}})
    assert resp.status_code == 202
    assert job_row(sql, resp.json()["id"])["trace_context"] is None

    assert [codec.attribute(r, "traceparent") for r in asyncio.run(run_records(stack))] == [None]


def test_an_agents_model_requests_and_tool_calls_are_spans_under_its_attempt(
    spans: InMemorySpanExporter,
) -> None:
    """A Pydantic AI run (the research example, the fake model over HTTP, the in-memory
    runner under a span standing for the attempt): each model request and each tool call
    is a span of its own under it, the requests with GenAI's attributes and tokens."""
    server = serve_in_thread()

    async def run() -> None:
        deps = deps_for(server)
        try:
            with tracing.tracer.start_as_current_span("job.attempt research.agent"):
                await run_kind(research_agent.research, QUESTION, deps=deps)
        finally:
            await deps.aclose()

    try:
        asyncio.run(run())
    finally:
        server.stop()
    (attempt,) = named(spans, "job.attempt research.agent")
    steps = sorted(children_of(spans, attempt), key=lambda s: s.start_time or 0)
    assert [s.name for s in steps] == [f"effect {k}" for k in STEPS]
    for step in steps:
        attrs = dict(step.attributes or {})
        if ":model:" in step.name:
            assert attrs["gen_ai.operation.name"] == "chat"
            assert attrs["gen_ai.response.model"] == "fake-model"
            assert attrs["gen_ai.usage.input_tokens"] > 0
            assert attrs["gen_ai.usage.output_tokens"] > 0
        else:
            assert "gen_ai.operation.name" not in attrs
