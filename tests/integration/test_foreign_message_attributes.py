"""Issue 13 item 3: a foreign message keeps its own message attributes on the DLQ.

Messages sent onto the source queue with plain boto3, received as Lambda's event source
hands them to the worker (base64 binary values and all), handled by the real engine; the
DLQ copy is read back with plain boto3. Real PostgreSQL, a real SQS server over HTTP.
"""

from __future__ import annotations

import json
import uuid
from typing import Any

import pytest

from app.transport import codec
from tests import carrier
from tests.conftest import Stack
from tests.helpers import dlq_messages, engine_for, receive_records

pytestmark = pytest.mark.integration

# SendMessage takes at most 10 message attributes.
SQS_MAX_ATTRIBUTES = 10

OWN = {
    "source": {"DataType": "String", "StringValue": "billing-export"},
    "priority": {"DataType": "Number", "StringValue": "7"},
    "trace": {"DataType": "Binary", "BinaryValue": b"\x00\x01\xfe\xff"},
    "region": {"DataType": "String.location", "StringValue": "eu-west-1 [old]"},
}


async def dead_letter_as_the_worker_does(stack: Stack, messages: list[dict[str, Any]]) -> None:
    """Send ``messages`` to the source queue, and have the engine handle them in one batch."""
    for m in messages:
        carrier.send_raw(stack, m["MessageBody"], m["MessageAttributes"])
    async with engine_for(stack.settings) as engine:
        records: dict[str, dict[str, Any]] = {}
        for _ in range(10):
            for r in await receive_records(engine):
                records[r["messageId"]] = r
            if len(records) == len(messages):
                break
        assert len(records) == len(messages)
        response = await engine.handle({"Records": list(records.values())}, None)
    assert response == {"batchItemFailures": []}


def letters_by_body(stack: Stack, expected: int) -> dict[str, dict[str, Any]]:
    found = dlq_messages(stack, rounds=10, visibility=30, enough=lambda f: len(f) >= expected)
    assert len(found) == expected
    return {m["Body"]: m.get("MessageAttributes") or {} for m in found}


@pytest.mark.asyncio
async def test_a_foreign_message_keeps_its_own_attributes_beside_the_reason_on_the_dlq(
    stack: Stack,
) -> None:
    """Issue 13 item 3: the DLQ copy of a foreign message had only tasklease-reason; its
    own attributes were dropped."""
    stranger = json.dumps({"job_id": str(uuid.uuid4()), "v": 1})  # another deployment's
    await dead_letter_as_the_worker_does(
        stack,
        [
            {"MessageBody": "not ours at all", "MessageAttributes": OWN},
            {"MessageBody": stranger, "MessageAttributes": OWN},
        ],
    )

    letters = letters_by_body(stack, 2)
    for body, says in (("not ours at all", "not a tasklease message"), (stranger, "unknown job")):
        attrs = letters[body]
        assert says in attrs.pop(codec.ATTR_REASON)["StringValue"], body
        assert attrs == OWN, body


@pytest.mark.asyncio
async def test_a_foreign_message_with_ten_attributes_keeps_nine_and_the_reason_names_the_rest(
    stack: Stack,
) -> None:
    """Issue 13 item 3: SQS takes 10 attributes; with the reason that makes 11. The first
    9 in name order are kept, the reason names the one dropped; an attribute spelled like
    ours (the redrive marker) is never carried over."""
    own = {
        f"a{i:02d}": {"DataType": "String", "StringValue": f"value {i}"}
        for i in range(SQS_MAX_ATTRIBUTES - 1)
    }
    own["zz-last"] = {"DataType": "String", "StringValue": "the tenth"}
    marked = {**OWN, codec.ATTR_DEAD_LETTERED_AT: {"DataType": "String", "StringValue": "x"}}
    await dead_letter_as_the_worker_does(
        stack,
        [
            {"MessageBody": "ten of its own", "MessageAttributes": own},
            {"MessageBody": "looks like a redrive", "MessageAttributes": marked},
        ],
    )

    letters = letters_by_body(stack, 2)
    ten = letters["ten of its own"]
    reason = ten.pop(codec.ATTR_REASON)["StringValue"]
    assert reason.startswith("not a tasklease message")
    assert "attributes dropped" in reason and "zz-last" in reason
    assert ten == {k: v for k, v in own.items() if k != "zz-last"}
    looks = letters["looks like a redrive"]
    assert codec.ATTR_DEAD_LETTERED_AT not in looks
    assert {k: v for k, v in looks.items() if k != codec.ATTR_REASON} == OWN
