"""One trace per job across a SIGKILL and a retry, from real processes.

The test runs a tiny OTLP/HTTP receiver (it parses each ExportTraceServiceRequest) and
points the API and two workers at it with ``OTEL_EXPORTER_OTLP_ENDPOINT``. A job is
submitted through the API with the caller's ``traceparent``; the first worker is
SIGKILLed after the job's first effect was recorded (its attempt span never ends, so is
never exported), and a second worker finishes the job. Every span of every process
that reached the receiver is then checked: one trace for the job, from the submit span
through both attempts (attempt 1 shows as its lease span, exported at the claim), with
the second attempt's effects as its children, the first one replayed."""

from __future__ import annotations

import gzip
import http.server
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)

from app.crashpoints import Point
from app.states import JobState
from tests.conftest import Stack, api_client, job_row, wait_for
from tests.e2e.test_crash_points import died_by_sigkill
from tests.helpers import crash_env
from tests.invariants import wait_for_state

pytestmark = pytest.mark.e2e

CALLER_TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
CALLER_PARENT = f"00-{CALLER_TRACE}-00f067aa0ba902b7-01"


class Receiver(http.server.ThreadingHTTPServer):
    """An OTLP/HTTP (protobuf) trace receiver: every span it was sent, flattened."""

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.spans: list[dict[str, Any]] = []
        self.lock = threading.Lock()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"

    def add(self, body: bytes) -> None:
        request = ExportTraceServiceRequest.FromString(body)
        for resource_spans in request.resource_spans:
            resource = _attributes(resource_spans.resource.attributes)
            for scope_spans in resource_spans.scope_spans:
                for span in scope_spans.spans:
                    flat = {
                        "service": resource.get("service.name"),
                        "name": span.name,
                        "trace_id": span.trace_id.hex(),
                        "span_id": span.span_id.hex(),
                        "parent_id": span.parent_span_id.hex(),
                        "attributes": _attributes(span.attributes),
                        "events": [e.name for e in span.events],
                    }
                    with self.lock:
                        self.spans.append(flat)

    def ancestors(self, span: dict[str, Any]) -> list[str]:
        """The ids of a span's parent, its parent's, and so on, as far as received."""
        with self.lock:
            by_id = {s["span_id"]: s for s in self.spans}
        out: list[str] = []
        while span["parent_id"] and span["parent_id"] not in out:
            out.append(span["parent_id"])
            if span["parent_id"] not in by_id:
                break
            span = by_id[span["parent_id"]]
        return out

    def named(self, prefix: str) -> list[dict[str, Any]]:
        with self.lock:
            return [s for s in self.spans if s["name"].startswith(prefix)]


def _attributes(kvs: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for kv in kvs:
        which = kv.value.WhichOneof("value")
        out[kv.key] = getattr(kv.value, which) if which else None
    return out


class _Handler(http.server.BaseHTTPRequestHandler):
    server: Receiver

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        if self.headers.get("Content-Encoding") == "gzip":
            body = gzip.decompress(body)
        self.server.add(body)
        answer = ExportTraceServiceResponse().SerializeToString()
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", str(len(answer)))
        self.end_headers()
        self.wfile.write(answer)

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    server = Receiver()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()


def test_a_job_killed_mid_attempt_and_retried_is_one_trace_with_both_attempts(
    stack: Stack, sql: Any, receiver: Receiver
) -> None:
    # Given every process exports its spans to the receiver, 100 ms after they end.
    stack.env["OTEL_EXPORTER_OTLP_ENDPOINT"] = receiver.url
    stack.env["OTEL_BSP_SCHEDULE_DELAY"] = "100"
    doomed = stack.worker(env=crash_env(Point.AFTER_EFFECT), name="doomed")
    url = stack.api()
    # When a job is submitted in the caller's trace, and its first worker dies after the
    # first effect was recorded.
    with api_client(url, stack.key()) as client:
        resp = client.post(
            "/v1/jobs",
            json={"kind": "demo.sleep", "payload": {"steps": 2}},
            headers={"traceparent": CALLER_PARENT},
        )
    assert resp.status_code == 202, resp.text
    job_id = resp.json()["id"]
    died_by_sigkill(doomed, "the worker armed at after_effect")
    assert job_row(sql, job_id)["attempt"] == 1
    # Then a second worker finishes it.
    stack.worker(name="rescuer")
    row = wait_for_state(sql, job_id, JobState.SUCCEEDED, timeout=60)
    assert row["attempt"] == 2
    wait_for(
        lambda: receiver.named("job.attempt demo.sleep") and len(receiver.named("effect ")) >= 2,
        timeout=30,
        what="the rescuing worker's spans to reach the receiver",
    )

    # One trace: the caller's, from the submit span through both attempts.
    assert row["trace_context"].split("-")[1] == CALLER_TRACE
    (server,) = receiver.named("POST /v1/jobs")
    (submit,) = receiver.named("job.submit")
    assert server["service"] == submit["service"] == "tasklease-api"
    assert server["parent_id"] == "00f067aa0ba902b7"
    assert server["span_id"] in receiver.ancestors(submit)  # under FastAPI's endpoint span
    leases = receiver.named("job.lease")
    assert sorted(s["attributes"]["job.attempt"] for s in leases) == [1, 2]
    assert len({s["attributes"]["job.worker"] for s in leases}) == 2  # two workers
    (attempt,) = receiver.named("job.attempt demo.sleep")
    assert attempt["attributes"]["job.attempt"] == 2
    assert attempt["attributes"]["job.outcome"] == "succeeded"
    job_spans = [*leases, attempt, server, submit]
    assert {s["trace_id"] for s in job_spans} == {CALLER_TRACE}
    assert {s["service"] for s in [*leases, attempt]} == {"tasklease-worker"}
    assert {s["parent_id"] for s in [*leases, attempt]} == {submit["span_id"]}
    # The effects are the second attempt's children: the first replayed, the next run.
    effects = {
        s["name"]: s["attributes"]["effect.replayed"]
        for s in receiver.named("effect ")
        if s["parent_id"] == attempt["span_id"]
    }
    assert effects == {"effect step-0": True, "effect step-1": False}
