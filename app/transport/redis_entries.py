"""The Redis carrier's entries: a message as stream fields and back, and receipt handles.

An entry's fields: ``b`` the body, ``a`` its message attributes (JSON, binary values as
base64), ``t`` when it was first sent (ms), ``g`` its tenant (the message group), ``r``
the receives it had before it was last re-scheduled, ``why`` a dead letter's reason. A
receipt handle is ``stream|id|delivery count``: it names its stream and its delivery.
"""

from __future__ import annotations

import base64
import json
import time
from collections.abc import Mapping, Sequence
from typing import Any

from app import errors
from app.transport import codec
from app.transport.base import Message

GROUP = "tasklease"


def handle(stream: str, entry_id: str, receives: int) -> str:
    return f"{stream}|{entry_id}|{receives}"


def parse_handle(receipt_handle: str) -> tuple[str, str, int]:
    """The stream, entry id and delivery count a receipt handle names."""
    try:
        stream, entry_id, count = receipt_handle.rsplit("|", 2)
        return stream, entry_id, int(count)
    except ValueError as exc:
        raise errors.QueueError(
            f"Redis: {receipt_handle!r} is not a receipt handle of this carrier"
        ) from exc


def encode_attributes(attributes: Mapping[str, Mapping[str, Any]]) -> str:
    """Message attributes as JSON (binary values as base64)."""
    out: dict[str, dict[str, str]] = {}
    for name, value in attributes.items():
        if "BinaryValue" in value:
            raw = base64.b64encode(bytes(value["BinaryValue"])).decode()
            out[name] = {"DataType": str(value["DataType"]), "BinaryValue": raw}
        else:
            out[name] = {"DataType": str(value["DataType"]), "StringValue": value["StringValue"]}
    return json.dumps(out, separators=(",", ":"))


def decode_attributes(raw: str | None) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    for name, value in json.loads(raw or "{}").items():
        if "BinaryValue" in value:
            value = {**value, "BinaryValue": base64.b64decode(value["BinaryValue"])}
        out[name] = value
    return out


def fields_for(
    body: str,
    attributes: Mapping[str, Mapping[str, Any]] | None = None,
    *,
    tenant: str | None = None,
    sent_ms: int | None = None,
    why: str | None = None,
) -> dict[str, str]:
    fields = {"b": body, "t": str(sent_ms or int(time.time() * 1000))}
    if attributes:
        fields["a"] = encode_attributes(attributes)
    if tenant:
        fields["g"] = tenant
    if why:
        fields["why"] = why[: codec.MAX_REASON_CHARS]
    return fields


def flat(fields: Mapping[str, str]) -> list[str]:
    return [x for kv in fields.items() for x in kv]


def typed(fields: Mapping[str, str]) -> Any:
    """Fields as redis-py's xadd is typed to take them."""
    return dict(fields)


def pairs(flat_fields: Sequence[str]) -> dict[str, str]:
    return {str(flat_fields[i]): str(flat_fields[i + 1]) for i in range(0, len(flat_fields), 2)}


def message(stream: str, entry_id: str, receives: int, fields: Mapping[str, str]) -> Message:
    """A stream entry in the shape ReceiveMessage gives a message."""
    attributes: dict[str, str] = {
        "ApproximateReceiveCount": str(receives),
        "SentTimestamp": fields.get("t", entry_id.split("-", 1)[0]),
    }
    if fields.get("g"):
        attributes["MessageGroupId"] = fields["g"]
    message: Message = {
        "MessageId": entry_id,
        "ReceiptHandle": handle(stream, entry_id, receives - int(fields.get("r", "0"))),
        "Body": fields.get("b", ""),
        "MessageAttributes": decode_attributes(fields.get("a")),
        "Attributes": attributes,
    }
    if fields.get("why"):
        message["DeadLetterReason"] = fields["why"]
    return message
