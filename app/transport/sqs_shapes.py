"""The shapes of SQS requests and answers the SQS carrier builds: batch entries, message
attributes, message groups, and several queues' answers read as one."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from app.settings import aws_limits as limits
from app.transport import codec

ATTR_KEYS = {"DataType", "StringValue", "BinaryValue"}
# SendMessage takes at most 10 message attributes.
MAX_MESSAGE_ATTRIBUTES = 10


def chunks(items: Sequence[Any], size: int = limits.MAX_BATCH) -> Iterable[Sequence[Any]]:
    for i in range(0, len(items), size):
        yield items[i : i + size]


def string(value: str) -> dict[str, str]:
    return {"DataType": "String", "StringValue": value}


def with_attributes(attributes: dict[str, Any]) -> dict[str, Any]:
    return {"MessageAttributes": attributes} if attributes else {}


def now() -> str:
    return dt.datetime.now(dt.UTC).isoformat(timespec="milliseconds")


def group(tenant: str | None) -> dict[str, str]:
    """SQS fair queues: the tenant as the message group of a standard queue, so AWS
    serves a quiet tenant's messages first while another's burst is queued. (moto's
    server and LocalStack accept it and give it back on ReceiveMessage, and schedule
    nothing by it: docs/explain/design.md#priorities.)"""
    return {"MessageGroupId": tenant[:128]} if tenant else {}


def summed(depths: Sequence[dict[str, int]]) -> dict[str, int]:
    total: dict[str, int] = {}
    for d in depths:
        for k, v in d.items():
            total[k] = total.get(k, 0) + v
    return total


def moved_entry(i: int, m: Mapping[str, Any]) -> dict[str, Any]:
    """A dead letter as the batch entry that sends it back: its body, its attributes
    (with our marker added when SQS moved it itself) and its message group."""
    attrs = dict(m.get("MessageAttributes") or {})
    attrs.setdefault(codec.ATTR_DEAD_LETTERED_AT, string(dt.datetime.now(dt.UTC).isoformat()))
    attrs = {k: {kk: vv for kk, vv in v.items() if kk in ATTR_KEYS} for k, v in attrs.items()}
    tenant = (m.get("Attributes") or {}).get("MessageGroupId")
    return {"Id": str(i), "MessageBody": m["Body"], "MessageAttributes": attrs} | group(tenant)


def one_status(tasks: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """The newest move tasks of the DLQs as one task's status."""
    if len(tasks) <= 1:
        return tasks[0] if tasks else {}
    states = [t.get("Status") for t in tasks]
    status = next(
        (s for s in ("RUNNING", "FAILED", "CANCELLING", "CANCELLED") if s in states), "COMPLETED"
    )
    merged: dict[str, Any] = {"Status": status}
    for key in ("ApproximateNumberOfMessagesMoved", "ApproximateNumberOfMessagesToMove"):
        counts = [t[key] for t in tasks if t.get(key) is not None]
        if counts:
            merged[key] = sum(int(c) for c in counts)
    reasons = [t["FailureReason"] for t in tasks if t.get("FailureReason")]
    if reasons:
        merged["FailureReason"] = "; ".join(reasons)
    return merged


def dead_letter_attributes(
    job_id: object, reason: str, generation: int, traceparent: str | None
) -> dict[str, Any]:
    """What a job's dead letter carries, on every carrier: the marker, the reason, the job
    id, the redrive generation and the job's trace context."""
    return {
        codec.ATTR_DEAD_LETTERED_AT: string(now()),
        codec.ATTR_REASON: string((reason or "unknown")[: codec.MAX_REASON_CHARS]),
        codec.ATTR_JOB_ID: string(str(job_id)),
        codec.ATTR_GENERATION: {"DataType": "Number", "StringValue": str(generation)},
        **codec.trace_attributes(traceparent),
    }


def foreign_attributes(own: Mapping[str, Mapping[str, Any]], reason: str) -> dict[str, Any]:
    """A foreign message's own attributes and the reason, within SQS's 10 per message.

    Attributes spelled like ours (``tasklease-*``) are not carried over: the reason is
    written anew and a foreign message never gets the redrive marker. When more than 9
    remain, the first 9 in name order are kept and the reason names the ones dropped."""
    kept = {
        name: {k: v for k, v in value.items() if k in ATTR_KEYS}
        for name, value in sorted(own.items())
        if not name.startswith(codec.ATTR_PREFIX)
    }
    room = MAX_MESSAGE_ATTRIBUTES - 1
    dropped = list(kept)[room:]
    if dropped:
        kept = dict(list(kept.items())[:room])
        note = f" (attributes dropped, SQS keeps {MAX_MESSAGE_ATTRIBUTES}: {', '.join(dropped)})"
        reason = reason[: max(0, codec.MAX_REASON_CHARS - len(note))] + note
    return {**kept, codec.ATTR_REASON: string(reason[: codec.MAX_REASON_CHARS])}
