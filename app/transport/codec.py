"""The claim-check message codec: what a tasklease message on any carrier says.

A message names the job and nothing else (the database holds the rest). A dead letter
carries its reason and a marker in message attributes; the marker is what makes a message
on the source queue a redrive, and its generation lets a redrive be honoured once.
"""

from __future__ import annotations

import base64
import binascii
import json
import uuid
from collections.abc import Iterable, Mapping
from typing import Any

from app import errors

MESSAGE_VERSION = 1
# Message attributes. The marker is what makes a message on the source queue a redrive.
ATTR_DEAD_LETTERED_AT = "tasklease-dead-lettered-at"
ATTR_REASON = "tasklease-reason"
ATTR_JOB_ID = "tasklease-job-id"
# The job's redrive count when it was dead-lettered: a redrive is honoured once per
# dead-lettering, so a stale copy of an older dead letter cannot run the job again.
ATTR_GENERATION = "tasklease-generation"
# Every attribute we write starts so: a foreign message's own are kept on its dead letter,
# except any spelled like ours (the reason is written anew, and a foreign message must
# never carry the marker that makes a message a redrive).
ATTR_PREFIX = "tasklease-"
MAX_REASON_CHARS = 1000
# The job's trace context (W3C, the name the header has): on every message sent for a
# job; a worker's attempt span joins that trace (app/tracing.py).
ATTR_TRACEPARENT = "traceparent"

# How a reason names a JSON value's type: the reader has the body, not Python.
_JSON_TYPES = {bool: "a boolean", int: "an integer", float: "a decimal number", str: "a string"}
_JSON_TYPES.update({type(None): "null", list: "an array", dict: "an object"})
# How much of an unexpected value a reason quotes.
_QUOTE_CHARS = 60


def body_for(job_id: uuid.UUID | str) -> str:
    """The claim check: the message names the job; the database holds everything else."""
    return json.dumps({"job_id": str(job_id), "v": MESSAGE_VERSION}, separators=(",", ":"))


def _quoted(value: Any) -> str:
    """A value as the body spelled it, shortened, and ASCII: a message attribute cannot
    carry every character a body can (a lone surrogate, most control characters)."""
    text = json.dumps(value)
    return text if len(text) <= _QUOTE_CHARS else text[: _QUOTE_CHARS - 3] + "..."


def parse_body(body: str) -> uuid.UUID:
    """The job id from a message body, or BadRequest saying what is wrong with it.

    Ours is exactly ``{"job_id": "<uuid>", "v": 1}`` (extra fields ignored): ``v`` must be
    the JSON integer 1, and neither ``true`` nor ``1.0``, which Python would compare equal
    to 1 (bool is an int; 1.0 == 1)."""
    try:
        doc = json.loads(body)
    except (TypeError, ValueError) as exc:
        raise errors.BadRequest("message body is not JSON") from exc
    if not isinstance(doc, dict):
        raise errors.BadRequest(f"message body is not a JSON object but {_JSON_TYPES[type(doc)]}")
    if "v" not in doc:
        raise errors.BadRequest(
            f'message body has no version "v" (ours carry "v": {MESSAGE_VERSION})'
        )
    version = doc["v"]
    if type(version) is not int:
        raise errors.BadRequest(
            f"message version {_quoted(version)} is {_JSON_TYPES[type(version)]}, "
            f"not the integer {MESSAGE_VERSION}"
        )
    if version != MESSAGE_VERSION:
        raise errors.BadRequest(f"message version {_quoted(version)} is not {MESSAGE_VERSION}")
    if "job_id" not in doc:
        raise errors.BadRequest('message body has no valid job_id: "job_id" is missing')
    raw = doc["job_id"]
    if not isinstance(raw, str):
        raise errors.BadRequest(
            f"message body has no valid job_id: {_quoted(raw)} is {_JSON_TYPES[type(raw)]}, "
            "not a UUID string"
        )
    try:
        return uuid.UUID(raw)
    except ValueError as exc:
        raise errors.BadRequest(
            f"message body has no valid job_id: {_quoted(raw)} is not a UUID"
        ) from exc


def job_ids(messages: Iterable[Mapping[str, Any]]) -> dict[str, uuid.UUID]:
    """MessageId -> job id for the messages that are tasklease claim checks; others left out."""
    out: dict[str, uuid.UUID] = {}
    for m in messages:
        try:
            out[m["MessageId"]] = parse_body(m.get("Body", ""))
        except errors.BadRequest:
            continue
    return out


def _attributes(message: Mapping[str, Any]) -> Mapping[str, Any]:
    """The message attributes in either shape a message reaches us in: a Lambda event
    record (``messageAttributes``) or a received message (``MessageAttributes``)."""
    return message.get("messageAttributes") or message.get("MessageAttributes") or {}


def message_attributes(message: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """A message's own attributes, from either shape, as SendMessage takes them:
    ``{"DataType", "StringValue"}``, or ``{"DataType", "BinaryValue": bytes}`` for the
    Binary types (a Lambda record carries those as base64 text). An attribute with no
    value it could be sent with (or undecodable base64) is left out."""
    out: dict[str, dict[str, Any]] = {}
    for name, value in _attributes(message).items():
        if not isinstance(value, Mapping):
            continue
        data_type = str(value.get("DataType") or value.get("dataType") or "String")
        if data_type.startswith("Binary"):
            raw = value.get("BinaryValue", value.get("binaryValue"))
            if isinstance(raw, str):
                try:
                    raw = base64.b64decode(raw, validate=True)
                except (binascii.Error, ValueError):
                    continue
            if isinstance(raw, bytes | bytearray):
                out[str(name)] = {"DataType": data_type, "BinaryValue": bytes(raw)}
            continue
        text = value.get("StringValue", value.get("stringValue"))
        if text is not None:
            out[str(name)] = {"DataType": data_type, "StringValue": str(text)}
    return out


def attribute(message: Mapping[str, Any], name: str) -> str | None:
    """A string attribute of a message (either shape), or None when it lacks it."""
    value = _attributes(message).get(name) or {}
    raw = value.get("stringValue", value.get("StringValue"))
    return None if raw is None else str(raw)


def is_marked(message: Mapping[str, Any]) -> bool:
    """Whether the message carries our dead-letter marker: we dead-lettered it, or gave it
    the marker when moving it back to the source queue."""
    return ATTR_DEAD_LETTERED_AT in _attributes(message)


def redrive_generation(record: Mapping[str, Any]) -> int | None:
    """The generation a marked dead letter carries, when this message is one moved back;
    None for a message that is no redrive or whose generation is not a number."""
    if not is_marked(record):
        return None
    raw = attribute(record, ATTR_GENERATION)
    try:
        return int(raw) if raw is not None else None
    except ValueError:
        return None


def trace_attributes(traceparent: str | None) -> dict[str, dict[str, str]]:
    """The message attribute carrying a job's trace context; none without one."""
    if not traceparent:
        return {}
    return {ATTR_TRACEPARENT: {"DataType": "String", "StringValue": traceparent}}
