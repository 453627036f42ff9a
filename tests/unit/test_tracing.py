"""Tracing's set-up and a job's trace context as text (app/tracing.py), no SDK installed."""

from __future__ import annotations

import uuid

import pytest
from opentelemetry import trace

from app import errors, tracing
from app.transport import codec

pytestmark = pytest.mark.unit

PARENT = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"


def test_without_an_endpoint_nothing_is_installed() -> None:
    assert tracing.configure("tasklease-worker", environ={}) is False
    assert not tracing.enabled()
    # No span is current and tracing is off: a new job keeps no trace context.
    assert tracing.traceparent() is None
    assert tracing.for_new_job() is None


@pytest.mark.parametrize(
    ("variable", "value"),
    [
        ("OTEL_EXPORTER_OTLP_ENDPOINT", "localhost:4318"),
        ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "grpc://collector:4317"),
    ],
)
def test_a_bad_endpoint_stops_start_up_naming_the_variable(variable: str, value: str) -> None:
    with pytest.raises(errors.ConfigError, match=variable):
        tracing.configure("tasklease-api", environ={variable: value})
    assert not tracing.enabled()


def test_a_protocol_other_than_otlp_over_http_stops_start_up() -> None:
    env = {
        "OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4317",
        "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc",
    }
    with pytest.raises(errors.ConfigError, match="OTEL_EXPORTER_OTLP_PROTOCOL"):
        tracing.configure("tasklease-worker", environ=env)


def test_an_unknown_service_is_a_programming_error() -> None:
    with pytest.raises(ValueError, match="tasklease-web"):
        tracing.configure("tasklease-web", environ={})


def test_a_traceparent_is_read_back_and_a_malformed_one_is_none() -> None:
    ctx = tracing.context_of(PARENT)
    assert ctx is not None
    assert tracing.context_of("00-not-a-trace-01") is None
    assert tracing.context_of("00-" + "0" * 32 + "-b7ad6b7169203331-01") is None  # invalid id
    assert tracing.context_of(None) is None


def test_the_message_attribute_carries_the_traceparent_and_nothing_without_one() -> None:
    attrs = codec.trace_attributes(PARENT)
    assert attrs == {"traceparent": {"DataType": "String", "StringValue": PARENT}}
    record = {"messageAttributes": {"traceparent": {"stringValue": PARENT, "dataType": "String"}}}
    assert codec.attribute(record, codec.ATTR_TRACEPARENT) == PARENT
    assert codec.trace_attributes(None) == {}


def test_a_job_without_a_context_has_the_trace_its_id_names() -> None:
    job_id = uuid.UUID("0af76519-16cd-43dd-8448-eb211c80319c")
    span = trace.get_current_span(tracing.of_job(job_id)).get_span_context()
    assert f"{span.trace_id:032x}" == job_id.hex
    assert span.is_valid and span.is_remote
