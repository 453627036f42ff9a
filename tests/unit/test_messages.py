"""The claim check on the queue: {"job_id": ..., "v": 1}, and nothing else is ours."""

from __future__ import annotations

import json
import uuid

import pytest

from app import errors, queue

pytestmark = pytest.mark.unit

JOB = uuid.UUID("4b0f2c9e-8d3a-4f4e-9a51-0c7f3e2d1b6a")


def test_the_claim_check_is_accepted() -> None:
    assert queue.parse_body(json.dumps({"job_id": str(JOB), "v": 1})) == JOB


def test_extra_fields_in_a_claim_check_are_ignored() -> None:
    assert queue.parse_body(json.dumps({"job_id": str(JOB), "v": 1, "trace": "x"})) == JOB


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
        (json.dumps({"job_id": str(JOB), "v": "1"}), "version '1' is not 1"),
        (json.dumps({"job_id": str(JOB)}), "version None is not 1"),
        (json.dumps({"v": 1}), "no valid job_id"),
        (json.dumps({"job_id": "not-a-uuid", "v": 1}), "no valid job_id"),
        (json.dumps({"job_id": None, "v": 1}), "no valid job_id"),
        (json.dumps({"job_id": 12345, "v": 1}), "no valid job_id"),
        (json.dumps({"job_id": [str(JOB)], "v": 1}), "no valid job_id"),
    ],
)
def test_a_body_that_is_not_our_claim_check_is_refused_saying_why(body: str, says: str) -> None:
    with pytest.raises(errors.BadRequest) as caught:
        queue.parse_body(body)
    assert says in str(caught.value)


def test_body_for_writes_exactly_the_claim_check() -> None:
    body = queue.body_for(JOB)
    assert json.loads(body) == {"job_id": str(JOB), "v": queue.MESSAGE_VERSION}
    assert " " not in body  # compact: the claim check stays tiny


@pytest.mark.parametrize("job_id", [JOB, str(JOB), uuid.uuid4()])
def test_body_for_round_trips_through_parse_body(job_id: uuid.UUID | str) -> None:
    assert queue.parse_body(queue.body_for(job_id)) == uuid.UUID(str(job_id))
