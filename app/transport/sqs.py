"""The SQS-compatible queue: claim-check messages, batches, visibility as leases.

The endpoint comes from botocore's own variables (``AWS_ENDPOINT_URL_SQS`` or
``AWS_ENDPOINT_URL``), so AWS, LocalStack and moto's server need no code change.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import math
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import botocore.exceptions
from aiobotocore.session import get_session
from botocore.config import Config

from app import aws_limits as limits
from app import errors
from app.config import Settings

MESSAGE_VERSION = 1
# Message attributes. The marker is what makes a message on the source queue a redrive.
ATTR_DEAD_LETTERED_AT = "tasklease-dead-lettered-at"
ATTR_REASON = "tasklease-reason"
ATTR_JOB_ID = "tasklease-job-id"
# The job's redrive count when it was dead-lettered: a redrive is honoured once per
# dead-lettering, so a stale copy of an older dead letter cannot run the job again.
ATTR_GENERATION = "tasklease-generation"
MAX_REASON_CHARS = 1000
# StartMessageMoveTask moves at most 500 messages per second.
MAX_MOVE_RATE = 500
_UNSUPPORTED = {
    "InvalidAction",
    "UnsupportedOperation",
    "NotImplemented",
    "AWS.SimpleQueueService.UnsupportedOperation",
}
_ATTR_KEYS = {"DataType", "StringValue", "BinaryValue"}


def body_for(job_id: uuid.UUID | str) -> str:
    """The claim check: the message names the job; the database holds everything else."""
    return json.dumps({"job_id": str(job_id), "v": MESSAGE_VERSION}, separators=(",", ":"))


# How a reason names a JSON value's type: the reader has the body, not Python.
_JSON_TYPES = {bool: "a boolean", int: "an integer", float: "a decimal number", str: "a string"}
_JSON_TYPES.update({type(None): "null", list: "an array", dict: "an object"})
# How much of an unexpected value a reason quotes.
_QUOTE_CHARS = 60


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


def _chunks(items: Sequence[Any], size: int = limits.MAX_BATCH) -> Iterable[Sequence[Any]]:
    for i in range(0, len(items), size):
        yield items[i : i + size]


@dataclass(frozen=True)
class QueueUrls:
    queue_url: str
    dlq_url: str


class Queue:
    """An open SQS client bound to the source queue and its dead-letter queue."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self._stack = contextlib.AsyncExitStack()
        self._client: Any = None

    async def open(self) -> None:
        session = get_session()
        cfg = Config(
            retries={"mode": "standard", "max_attempts": 3},
            max_pool_connections=50,
            connect_timeout=5,
            read_timeout=limits.MAX_WAIT_SECONDS + 10,
        )
        self._client = await self._stack.enter_async_context(
            session.create_client("sqs", region_name=self.settings.region, config=cfg)
        )

    async def close(self) -> None:
        await self._stack.aclose()
        self._client = None

    @property
    def client(self) -> Any:
        if self._client is None:
            raise errors.QueueError("the SQS client is not open")
        return self._client

    async def _call(self, op: str, **kwargs: Any) -> Any:
        try:
            return await getattr(self.client, op)(**kwargs)
        except (botocore.exceptions.BotoCoreError, botocore.exceptions.ClientError) as exc:
            raise errors.QueueError(f"SQS {op}: {exc}") from exc

    # --- sending ---------------------------------------------------------------

    async def send_jobs(self, job_ids: Sequence[uuid.UUID | str]) -> list[str]:
        """Send one message per job in batches of 10; returns the job ids that failed."""
        failed: list[str] = []
        for chunk in _chunks(list(job_ids)):
            entries = [{"Id": str(i), "MessageBody": body_for(j)} for i, j in enumerate(chunk)]
            try:
                resp = await self._call(
                    "send_message_batch", QueueUrl=self.settings.queue, Entries=entries
                )
            except errors.QueueError:
                failed.extend(str(j) for j in chunk)
                continue
            failed.extend(str(chunk[int(f["Id"])]) for f in resp.get("Failed", []))
        return failed

    async def send_dead_letter(
        self, job_id: uuid.UUID | str, reason: str, *, generation: int = 0
    ) -> None:
        """A new message on the DLQ, carrying the marker and the reason."""
        now = dt.datetime.now(dt.UTC).isoformat(timespec="milliseconds")
        await self._call(
            "send_message",
            QueueUrl=self.settings.dlq,
            MessageBody=body_for(job_id),
            MessageAttributes={
                ATTR_DEAD_LETTERED_AT: {"DataType": "String", "StringValue": now},
                ATTR_REASON: {
                    "DataType": "String",
                    "StringValue": (reason or "unknown")[:MAX_REASON_CHARS],
                },
                ATTR_JOB_ID: {"DataType": "String", "StringValue": str(job_id)},
                ATTR_GENERATION: {"DataType": "Number", "StringValue": str(generation)},
            },
        )

    async def send_raw_dead_letter(self, body: str, reason: str) -> None:
        """A message that is not ours goes to the DLQ as it came, with the reason."""
        await self._call(
            "send_message",
            QueueUrl=self.settings.dlq,
            MessageBody=body or "(empty)",
            MessageAttributes={
                ATTR_REASON: {"DataType": "String", "StringValue": reason[:MAX_REASON_CHARS]},
            },
        )

    # --- receiving -------------------------------------------------------------

    async def receive(
        self,
        *,
        max_messages: int,
        wait_seconds: int,
        url: str | None = None,
        visibility: int | None = None,
    ) -> list[dict[str, Any]]:
        extra = {} if visibility is None else {"VisibilityTimeout": visibility}
        resp = await self._call(
            "receive_message",
            QueueUrl=url or self.settings.queue,
            **extra,
            MaxNumberOfMessages=max_messages,
            WaitTimeSeconds=wait_seconds,
            MessageSystemAttributeNames=["All"],
            MessageAttributeNames=["All"],
        )
        return list(resp.get("Messages", []))

    async def delete_batch(
        self, receipt_handles: Sequence[str], *, url: str | None = None
    ) -> list[str]:
        """Delete in batches of 10; returns the handles that failed."""
        failed: list[str] = []
        for chunk in _chunks(list(receipt_handles)):
            entries = [{"Id": str(i), "ReceiptHandle": h} for i, h in enumerate(chunk)]
            try:
                resp = await self._call(
                    "delete_message_batch", QueueUrl=url or self.settings.queue, Entries=entries
                )
            except errors.QueueError:
                failed.extend(chunk)
                continue
            failed.extend(chunk[int(f["Id"])] for f in resp.get("Failed", []))
        return failed

    async def change_visibility(
        self, receipt_handle: str, seconds: float, *, url: str | None = None
    ) -> None:
        # Whole seconds, rounded up: a backoff of 0.4 s rounded down would bring the
        # message back at once.
        seconds = math.ceil(max(0, min(seconds, limits.MAX_VISIBILITY_SECONDS)))
        await self._call(
            "change_message_visibility",
            QueueUrl=url or self.settings.queue,
            ReceiptHandle=receipt_handle,
            VisibilityTimeout=seconds,
        )

    async def send_moved(self, messages: Sequence[Mapping[str, Any]]) -> list[str]:
        """Send DLQ messages to the source queue as they were, attributes and all; a message
        without our marker (SQS moved it by the redrive policy) gets one. Returns the
        MessageIds that failed."""
        failed: list[str] = []
        for chunk in _chunks(list(messages)):
            entries = []
            for i, m in enumerate(chunk):
                attrs = dict(m.get("MessageAttributes") or {})
                attrs.setdefault(
                    ATTR_DEAD_LETTERED_AT,
                    {"DataType": "String", "StringValue": dt.datetime.now(dt.UTC).isoformat()},
                )
                attrs = {
                    k: {kk: vv for kk, vv in v.items() if kk in _ATTR_KEYS}
                    for k, v in attrs.items()
                }
                entries.append({"Id": str(i), "MessageBody": m["Body"], "MessageAttributes": attrs})
            try:
                resp = await self._call(
                    "send_message_batch", QueueUrl=self.settings.queue, Entries=entries
                )
            except errors.QueueError:
                failed.extend(m["MessageId"] for m in chunk)
                continue
            failed.extend(chunk[int(f["Id"])]["MessageId"] for f in resp.get("Failed", []))
        return failed

    async def start_move(self, *, rate: int | None = None) -> str | None:
        """StartMessageMoveTask from the DLQ back to the source queue, the destination named
        (LocalStack fails the task without one for messages SQS did not move itself).
        Returns the task handle, or None where the endpoint does not implement it (moto)."""
        params: dict[str, Any] = {
            "SourceArn": await self.queue_arn(self.settings.dlq),
            "DestinationArn": await self.queue_arn(self.settings.queue),
        }
        if rate:
            params["MaxNumberOfMessagesPerSecond"] = min(rate, MAX_MOVE_RATE)
        try:
            resp = await self.client.start_message_move_task(**params)
        except botocore.exceptions.ClientError as exc:
            err = exc.response.get("Error", {})
            status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0)
            if status >= 500 or err.get("Code") in _UNSUPPORTED:
                return None
            raise errors.QueueError(f"SQS start_message_move_task: {exc}") from exc
        except botocore.exceptions.BotoCoreError as exc:
            raise errors.QueueError(f"SQS start_message_move_task: {exc}") from exc
        return str(resp.get("TaskHandle", ""))

    async def move_status(self) -> dict[str, Any]:
        """The newest move task of the DLQ (LocalStack lists TaskHandle only while running)."""
        resp = await self._call(
            "list_message_move_tasks",
            SourceArn=await self.queue_arn(self.settings.dlq),
            MaxResults=1,
        )
        results = resp.get("Results") or [{}]
        return dict(results[0])

    # --- administration --------------------------------------------------------

    async def queue_arn(self, url: str) -> str:
        resp = await self._call("get_queue_attributes", QueueUrl=url, AttributeNames=["QueueArn"])
        return str(resp["Attributes"]["QueueArn"])

    async def depth(self, url: str) -> dict[str, int]:
        resp = await self._call(
            "get_queue_attributes",
            QueueUrl=url,
            AttributeNames=[
                "ApproximateNumberOfMessages",
                "ApproximateNumberOfMessagesNotVisible",
                "ApproximateNumberOfMessagesDelayed",
            ],
        )
        return {k: int(v) for k, v in resp["Attributes"].items()}

    async def create_queues(self, name: str) -> QueueUrls:
        """Create (or find) the source queue and its DLQ, with the redrive policy."""
        s = self.settings
        dlq = await self._call(
            "create_queue",
            QueueName=f"{name}-dlq",
            Attributes={"MessageRetentionPeriod": str(s.dlq_retention_seconds)},
        )
        dlq_url = str(dlq["QueueUrl"])
        dlq_arn = await self.queue_arn(dlq_url)
        src = await self._call(
            "create_queue",
            QueueName=name,
            Attributes={
                "VisibilityTimeout": str(s.visibility_timeout_seconds),
                "MessageRetentionPeriod": str(s.message_retention_seconds),
                "RedrivePolicy": json.dumps(
                    {"deadLetterTargetArn": dlq_arn, "maxReceiveCount": s.max_receive_count}
                ),
            },
        )
        src_url = str(src["QueueUrl"])
        src_arn = await self.queue_arn(src_url)
        await self._call(
            "set_queue_attributes",
            QueueUrl=dlq_url,
            Attributes={
                "RedriveAllowPolicy": json.dumps(
                    {"redrivePermission": "byQueue", "sourceQueueArns": [src_arn]}
                )
            },
        )
        return QueueUrls(queue_url=src_url, dlq_url=dlq_url)
