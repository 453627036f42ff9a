"""The claim check on the queue: {"job_id": ..., "v": 1}, and nothing else is ours; and the
dead-letter marker a redriven message carries (app/transport/codec.py)."""

from __future__ import annotations

import json
import uuid
from typing import Any

import pytest

from app import errors
from app.transport import codec

pytestmark = pytest.mark.unit

JOB = uuid.UUID("4b0f2c9e-8d3a-4f4e-9a51-0c7f3e2d1b6a")


def test_the_claim_check_is_accepted() -> None:
    assert codec.parse_body(json.dumps({"job_id": str(JOB), "v": 1})) == JOB


def test_extra_fields_in_a_claim_check_are_ignored() -> None:
    assert codec.parse_body(json.dumps({"job_id": str(JOB), "v": 1, "trace": "x"})) == JOB


@pytest.mark.parametrize(
    ("body", "says"),
    [
        ("not json", "not JSON"),
        ("", "not JSON"),
        ('{"job_id": ', "not JSON"),
        ("[1, 2]", "not a JSON object"),
        ('"a string"', "not a JSON object"),
        ("42", "not a JSON object"),
        ("null", "not a JSON object"),
        (json.dumps({"job_id": str(JOB), "v": 2}), "version 2 is not 1"),
        (json.dumps({"job_id": str(JOB), "v": "1"}), 'version "1" is a string, not the integer 1'),
        (json.dumps({"job_id": str(JOB)}), 'has no version "v"'),
        (json.dumps({"v": 1}), "no valid job_id"),
        (json.dumps({"job_id": "not-a-uuid", "v": 1}), "no valid job_id"),
        (json.dumps({"job_id": None, "v": 1}), "no valid job_id"),
        (json.dumps({"job_id": 12345, "v": 1}), "no valid job_id"),
        (json.dumps({"job_id": [str(JOB)], "v": 1}), "no valid job_id"),
    ],
)
def test_a_body_that_is_not_our_claim_check_is_refused_saying_why(body: str, says: str) -> None:
    with pytest.raises(errors.BadRequest) as caught:
        codec.parse_body(body)
    assert says in str(caught.value)


# "v" is compared as JSON compares it, not as Python does: True == 1 and 1.0 == 1 in
# Python (bool is an int), yet neither is the integer 1 a tasklease producer writes.
@pytest.mark.parametrize(
    ("version", "says"),
    [
        ("true", "message version true is a boolean, not the integer 1"),
        ("false", "message version false is a boolean, not the integer 1"),
        ("1.0", "message version 1.0 is a decimal number, not the integer 1"),
        ("1e0", "message version 1.0 is a decimal number, not the integer 1"),
        ("1.5", "message version 1.5 is a decimal number, not the integer 1"),
        ("null", "message version null is null, not the integer 1"),
        ("[1]", "message version [1] is an array, not the integer 1"),
        ('{"major": 1}', 'message version {"major": 1} is an object, not the integer 1'),
        ("0", "message version 0 is not 1"),
        ("-1", "message version -1 is not 1"),
    ],
)
def test_only_the_integer_1_is_our_version(version: str, says: str) -> None:
    body = f'{{"job_id": "{JOB}", "v": {version}}}'
    with pytest.raises(errors.BadRequest) as caught:
        codec.parse_body(body)
    assert str(caught.value) == says


@pytest.mark.parametrize(
    ("job_id", "says"),
    [
        # 32 decimal digits are 32 hex digits to uuid.UUID(): a number must not pass for an id.
        ("12345678901234567890123456789012", "12345678901234567890123456789012 is an integer"),
        ("true", "true is a boolean, not a UUID string"),
        ('{"id": 1}', '{"id": 1} is an object, not a UUID string'),
        ('""', '"" is not a UUID'),
        ('"job-42"', '"job-42" is not a UUID'),
    ],
)
def test_a_job_id_must_be_a_uuid_string(job_id: str, says: str) -> None:
    with pytest.raises(errors.BadRequest) as caught:
        codec.parse_body(f'{{"job_id": {job_id}, "v": 1}}')
    assert "no valid job_id" in str(caught.value)
    assert says in str(caught.value)


def test_a_reason_quotes_a_long_or_odd_value_short_and_in_ascii() -> None:
    """Reasons travel as message attributes, which cannot carry every character a body can."""
    for version in ("x" * 5000, r"\ud800\u0000\u00e9"):  # JSON escapes: a lone surrogate, NUL, é
        with pytest.raises(errors.BadRequest) as caught:
            codec.parse_body(f'{{"job_id": "{JOB}", "v": "{version}"}}')
        reason = str(caught.value)
        assert reason.isascii()
        assert len(reason) < 120
        assert "is a string, not the integer 1" in reason


def test_a_missing_job_id_is_named() -> None:
    with pytest.raises(errors.BadRequest) as caught:
        codec.parse_body('{"v": 1}')
    assert '"job_id" is missing' in str(caught.value)


def test_body_for_writes_exactly_the_claim_check() -> None:
    body = codec.body_for(JOB)
    assert json.loads(body) == {"job_id": str(JOB), "v": codec.MESSAGE_VERSION}
    assert " " not in body  # compact: the claim check stays tiny


@pytest.mark.parametrize("job_id", [JOB, str(JOB), uuid.uuid4()])
def test_body_for_round_trips_through_parse_body(job_id: uuid.UUID | str) -> None:
    assert codec.parse_body(codec.body_for(job_id)) == uuid.UUID(str(job_id))


def test_job_ids_keeps_only_our_claim_checks() -> None:
    other = uuid.uuid4()
    messages = [
        {"MessageId": "a", "Body": codec.body_for(JOB)},
        {"MessageId": "b", "Body": "not ours"},
        {"MessageId": "c"},  # no body at all
        {"MessageId": "d", "Body": codec.body_for(other)},
    ]
    assert codec.job_ids(messages) == {"a": JOB, "d": other}


def _marked(generation: str | None, *, lambda_shape: bool) -> dict[str, Any]:
    """A redriven message, as a Lambda event record or as ReceiveMessage returns it."""
    value, attributes = (
        ("stringValue", "messageAttributes")
        if lambda_shape
        else ("StringValue", "MessageAttributes")
    )
    attrs = {codec.ATTR_DEAD_LETTERED_AT: {value: "2026-01-01T00:00:00.000+00:00"}}
    if generation is not None:
        attrs[codec.ATTR_GENERATION] = {value: generation}
    return {"body": codec.body_for(JOB), attributes: attrs}


@pytest.mark.parametrize("lambda_shape", [True, False])
@pytest.mark.parametrize(
    ("generation", "expected"), [("0", 0), ("3", 3), (None, None), ("three", None)]
)
def test_a_marked_message_carries_its_redrive_generation(
    generation: str | None, expected: int | None, lambda_shape: bool
) -> None:
    message = _marked(generation, lambda_shape=lambda_shape)
    assert codec.is_marked(message)
    assert codec.redrive_generation(message) == expected


@pytest.mark.parametrize(
    "message",
    [
        {"body": "x"},
        {"messageAttributes": None},
        {"messageAttributes": {}},
        # A generation alone is no redrive: only the marker makes one.
        {"messageAttributes": {codec.ATTR_GENERATION: {"stringValue": "2"}}},
        {"MessageAttributes": {codec.ATTR_REASON: {"StringValue": "why"}}},
    ],
)
def test_an_unmarked_message_is_no_redrive(message: dict[str, Any]) -> None:
    assert not codec.is_marked(message)
    assert codec.redrive_generation(message) is None


def test_attribute_reads_a_string_attribute_of_either_shape() -> None:
    record = {
        "messageAttributes": {codec.ATTR_REASON: {"stringValue": "why", "dataType": "String"}}
    }
    received = {
        "MessageAttributes": {codec.ATTR_REASON: {"StringValue": "why", "DataType": "String"}}
    }
    assert codec.attribute(record, codec.ATTR_REASON) == "why"
    assert codec.attribute(received, codec.ATTR_REASON) == "why"
    assert codec.attribute(received, codec.ATTR_JOB_ID) is None
