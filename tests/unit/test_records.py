"""The local event source builds records in exactly the shape Lambda's SQS event has.

tests/events/sqs_event.json is the example event of
https://docs.aws.amazon.com/lambda/latest/dg/with-sqs.html (standard queue). Each test
turns the ReceiveMessage message that record came from (as boto3 returns it) into a
record and compares.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import pytest

from app.worker import event_source_mapping as eventsource

pytestmark = pytest.mark.unit

EVENT = json.loads((Path(__file__).parent.parent / "events" / "sqs_event.json").read_text())
RECORDS: list[dict[str, Any]] = EVENT["Records"]
RECORD_KEYS = {
    "messageId", "receiptHandle", "body", "attributes", "messageAttributes",
    "md5OfBody", "eventSource", "eventSourceARN", "awsRegion",
}  # fmt: skip


def received(record: dict[str, Any]) -> dict[str, Any]:
    """The ReceiveMessage message (boto3's shape) that Lambda turned into ``record``.

    boto3 leaves out MessageAttributes when there are none, and the list values
    ("Not implemented. Reserved for future use.") when they are empty.
    """
    message: dict[str, Any] = {
        "MessageId": record["messageId"],
        "ReceiptHandle": record["receiptHandle"],
        "MD5OfBody": record["md5OfBody"],
        "Body": record["body"],
        "Attributes": dict(record["attributes"]),
    }
    if record["messageAttributes"]:
        message["MD5OfMessageAttributes"] = "8c6f3c7d1c4e1a6b8d2e0f9a7b5c3d1e"
        message["MessageAttributes"] = {
            name: {
                key: value
                for key, value in {
                    "StringValue": attr.get("stringValue"),
                    "BinaryValue": attr.get("binaryValue"),
                    "StringListValues": attr.get("stringListValues") or None,
                    "BinaryListValues": attr.get("binaryListValues") or None,
                    "DataType": attr["dataType"],
                }.items()
                if value is not None
            }
            for name, attr in record["messageAttributes"].items()
        }
    return message


def to_record(record: dict[str, Any]) -> dict[str, Any]:
    return eventsource.to_record(
        received(record), queue_arn=record["eventSourceARN"], region=record["awsRegion"]
    )


def test_the_fixture_is_in_the_documented_shape() -> None:
    assert len(RECORDS) == 2
    for record in RECORDS:
        assert set(record) == RECORD_KEYS
        assert record["eventSource"] == "aws:sqs"
        assert set(record["attributes"]) == {
            "ApproximateReceiveCount", "SentTimestamp", "SenderId", "ApproximateFirstReceiveTimestamp",
        }  # fmt: skip
        assert record["md5OfBody"] == hashlib.md5(record["body"].encode()).hexdigest()


@pytest.mark.parametrize("index", range(len(RECORDS)))
def test_a_record_has_exactly_the_top_level_keys_of_lambdas_record(index: int) -> None:
    assert set(to_record(RECORDS[index])) == set(RECORDS[index])


@pytest.mark.parametrize("index", range(len(RECORDS)))
def test_system_attributes_and_fields_carry_over_unchanged(index: int) -> None:
    record = to_record(RECORDS[index])
    expected = RECORDS[index]
    for key in RECORD_KEYS - {"messageAttributes"}:
        assert record[key] == expected[key], key


def test_a_record_without_message_attributes_equals_lambdas_record() -> None:
    assert to_record(RECORDS[1]) == RECORDS[1]


def test_a_record_with_a_string_attribute_equals_lambdas_record() -> None:
    assert to_record(RECORDS[0]) == RECORDS[0]


def test_a_string_attribute_keeps_its_value_type_and_empty_lists() -> None:
    attr = to_record(RECORDS[0])["messageAttributes"]["myAttribute"]
    expected = RECORDS[0]["messageAttributes"]["myAttribute"]
    assert {k: attr[k] for k in expected} == expected


def test_a_binary_attribute_arrives_as_base64_text_like_lambdas() -> None:
    message = received(RECORDS[1])
    message["MessageAttributes"] = {"blob": {"BinaryValue": b"\x00\x01", "DataType": "Binary"}}
    record = eventsource.to_record(
        message, queue_arn="arn:aws:sqs:us-east-2:1:q", region="us-east-2"
    )
    assert record["messageAttributes"]["blob"] == {
        "binaryValue": "AAE=", "stringListValues": [], "binaryListValues": [], "dataType": "Binary",
    }  # fmt: skip
    json.dumps(record)


def test_the_dead_letter_marker_survives_as_a_message_attribute() -> None:
    from app.transport import codec

    message = received(RECORDS[1])
    message["MessageAttributes"] = {
        codec.ATTR_DEAD_LETTERED_AT: {
            "StringValue": "2026-01-01T00:00:00.000+00:00",
            "DataType": "String",
        }
    }
    record = eventsource.to_record(
        message, queue_arn="arn:aws:sqs:us-east-2:1:q", region="us-east-2"
    )
    marker = record["messageAttributes"][codec.ATTR_DEAD_LETTERED_AT]
    assert marker["stringValue"] == "2026-01-01T00:00:00.000+00:00"
    assert marker["dataType"] == "String"


def test_a_missing_md5_is_computed_from_the_body() -> None:
    message = received(RECORDS[1])
    del message["MD5OfBody"]
    record = eventsource.to_record(
        message, queue_arn="arn:aws:sqs:us-east-2:1:q", region="us-east-2"
    )
    assert record["md5OfBody"] == RECORDS[1]["md5OfBody"]


def test_local_context_counts_down_the_function_timeout() -> None:
    context = eventsource.LocalContext(900)
    left = context.get_remaining_time_in_millis()
    assert 899_000 < left <= 900_000
    assert eventsource.LocalContext(-5).get_remaining_time_in_millis() == 0
