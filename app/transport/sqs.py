"""The SQS carrier: claim checks in batches of ten, visibility as the lease, aiobotocore.

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
from typing import Any

import botocore.exceptions
from aiobotocore.session import get_session
from botocore.config import Config

from app import aws_limits as limits
from app import errors, metrics
from app.config import Settings
from app.transport import codec
from app.transport.base import Message, QueueUrls

# StartMessageMoveTask moves at most 500 messages per second.
MAX_MOVE_RATE = 500
_UNSUPPORTED = {
    "InvalidAction",
    "UnsupportedOperation",
    "NotImplemented",
    "AWS.SimpleQueueService.UnsupportedOperation",
}
_ATTR_KEYS = {"DataType", "StringValue", "BinaryValue"}
# SendMessage takes at most 10 message attributes.
MAX_MESSAGE_ATTRIBUTES = 10


def _chunks(items: Sequence[Any], size: int = limits.MAX_BATCH) -> Iterable[Sequence[Any]]:
    for i in range(0, len(items), size):
        yield items[i : i + size]


def _string(value: str) -> dict[str, str]:
    return {"DataType": "String", "StringValue": value}


def _with_attributes(attributes: dict[str, Any]) -> dict[str, Any]:
    return {"MessageAttributes": attributes} if attributes else {}


def _now() -> str:
    return dt.datetime.now(dt.UTC).isoformat(timespec="milliseconds")


class SqsTransport:
    """An open SQS client bound to the source queue and its dead-letter queue.

    The optional ``url`` arguments (another queue than the source) serve callers written
    before the Transport protocol; the protocol's DLQ methods replace them."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self._stack = contextlib.AsyncExitStack()
        self._client: Any = None
        self._arns: dict[str, str] = {}  # a queue's ARN never changes: asked once

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
        # Every request, whichever method made it (retries by botocore are not re-counted).
        self._client.meta.events.register("before-call.sqs", metrics.count_sqs_request)

    async def close(self) -> None:
        await self._stack.aclose()
        self._client = None

    @property
    def client(self) -> Any:
        if self._client is None:
            raise errors.QueueError("the SQS client is not open")
        return self._client

    async def _call_if_supported(self, op: str, **kwargs: Any) -> Any:
        """Like _call, but None where the endpoint does not implement ``op`` (moto has no
        message move tasks; a 5xx or an unsupported-operation code says so)."""
        try:
            return await getattr(self.client, op)(**kwargs)
        except botocore.exceptions.ClientError as exc:
            err = exc.response.get("Error", {})
            status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0)
            if status >= 500 or err.get("Code") in _UNSUPPORTED:
                return None
            raise errors.QueueError(f"SQS {op}: {exc}") from exc
        except botocore.exceptions.BotoCoreError as exc:
            raise errors.QueueError(f"SQS {op}: {exc}") from exc

    async def _call(self, op: str, **kwargs: Any) -> Any:
        try:
            return await getattr(self.client, op)(**kwargs)
        except (botocore.exceptions.BotoCoreError, botocore.exceptions.ClientError) as exc:
            raise errors.QueueError(f"SQS {op}: {exc}") from exc

    async def _send_batch(self, entries: list[dict[str, Any]]) -> list[int]:
        """One SendMessageBatch to the source queue; the indexes of the entries that failed
        (all of them when the call itself failed)."""
        try:
            resp = await self._call(
                "send_message_batch", QueueUrl=self.settings.queue, Entries=entries
            )
        except errors.QueueError:
            return list(range(len(entries)))
        return [int(f["Id"]) for f in resp.get("Failed", [])]

    # --- the source queue ------------------------------------------------------

    async def send_jobs(
        self,
        job_ids: Sequence[uuid.UUID | str],
        *,
        delay_seconds: float = 0,
        traces: Mapping[str, str | None] | None = None,
    ) -> list[str]:
        """Send one message per job in batches of 10, each with its job's trace context
        (``traces``: job id -> traceparent); returns the job ids that failed."""
        # Whole seconds, rounded up like visibility, within SendMessage's 15 minutes.
        delay = math.ceil(max(0, min(delay_seconds, limits.MAX_DELAY_SECONDS)))
        extra = {"DelaySeconds": delay} if delay else {}
        traces = traces or {}
        failed: list[str] = []
        for chunk in _chunks(list(job_ids)):
            entries = [
                {"Id": str(i), "MessageBody": codec.body_for(j), **extra}
                | _with_attributes(codec.trace_attributes(traces.get(str(j))))
                for i, j in enumerate(chunk)
            ]
            failed.extend(str(chunk[i]) for i in await self._send_batch(entries))
        return failed

    async def receive(
        self,
        *,
        max_messages: int,
        wait_seconds: int,
        url: str | None = None,
        visibility: int | None = None,
    ) -> list[Message]:
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

    async def source_arn(self) -> str:
        return await self.queue_arn(self.settings.queue)

    # --- the dead-letter queue -------------------------------------------------

    async def send_dead_letter(
        self,
        job_id: uuid.UUID | str,
        reason: str,
        *,
        generation: int = 0,
        traceparent: str | None = None,
    ) -> None:
        """A new message on the DLQ, carrying the marker, the reason and the job's trace
        context (a redrive moves it back with its attributes)."""
        await self._call(
            "send_message",
            QueueUrl=self.settings.dlq,
            MessageBody=codec.body_for(job_id),
            MessageAttributes={
                codec.ATTR_DEAD_LETTERED_AT: _string(_now()),
                codec.ATTR_REASON: _string((reason or "unknown")[: codec.MAX_REASON_CHARS]),
                codec.ATTR_JOB_ID: _string(str(job_id)),
                codec.ATTR_GENERATION: {"DataType": "Number", "StringValue": str(generation)},
                **codec.trace_attributes(traceparent),
            },
        )

    async def send_raw_dead_letter(
        self, body: str, reason: str, *, attributes: Mapping[str, Mapping[str, Any]] | None = None
    ) -> None:
        """A message that is not ours goes to the DLQ as it came, its own attributes beside
        the reason (see _foreign_attributes for what does not fit)."""
        await self._call(
            "send_message",
            QueueUrl=self.settings.dlq,
            MessageBody=body or "(empty)",
            MessageAttributes=_foreign_attributes(attributes or {}, reason),
        )

    async def receive_dead_letters(
        self, *, max_messages: int, wait_seconds: int, visibility: int | None = None
    ) -> list[Message]:
        return await self.receive(
            url=self.settings.dlq,
            max_messages=max_messages,
            wait_seconds=wait_seconds,
            visibility=visibility,
        )

    async def delete_dead_letters(self, receipt_handles: Sequence[str]) -> list[str]:
        return await self.delete_batch(receipt_handles, url=self.settings.dlq)

    async def release_dead_letters(self, receipt_handles: Sequence[str]) -> list[str]:
        """ChangeMessageVisibilityBatch to 0 in batches of 10; returns the handles that failed."""
        failed: list[str] = []
        for chunk in _chunks(list(receipt_handles)):
            entries = [
                {"Id": str(i), "ReceiptHandle": h, "VisibilityTimeout": 0}
                for i, h in enumerate(chunk)
            ]
            try:
                resp = await self._call(
                    "change_message_visibility_batch", QueueUrl=self.settings.dlq, Entries=entries
                )
            except errors.QueueError:
                failed.extend(chunk)
                continue
            failed.extend(chunk[int(f["Id"])] for f in resp.get("Failed", []))
        return failed

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
                    codec.ATTR_DEAD_LETTERED_AT, _string(dt.datetime.now(dt.UTC).isoformat())
                )
                attrs = {
                    k: {kk: vv for kk, vv in v.items() if kk in _ATTR_KEYS}
                    for k, v in attrs.items()
                }
                entries.append({"Id": str(i), "MessageBody": m["Body"], "MessageAttributes": attrs})
            failed.extend(chunk[i]["MessageId"] for i in await self._send_batch(entries))
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
        resp = await self._call_if_supported("start_message_move_task", **params)
        return None if resp is None else str(resp.get("TaskHandle", ""))

    async def move_status(self) -> dict[str, Any]:
        """The newest move task of the DLQ (LocalStack lists TaskHandle only while running)."""
        resp = await self._call(
            "list_message_move_tasks",
            SourceArn=await self.queue_arn(self.settings.dlq),
            MaxResults=1,
        )
        results = resp.get("Results") or [{}]
        return dict(results[0])

    async def move_running(self) -> bool:
        """ListMessageMoveTasks on the DLQ: is the newest task RUNNING? False where the
        endpoint does not implement it (moto), which then cannot run one either."""
        resp = await self._call_if_supported(
            "list_message_move_tasks",
            SourceArn=await self.queue_arn(self.settings.dlq),
            MaxResults=1,
        )
        return resp is not None and any(
            t.get("Status") == "RUNNING" for t in resp.get("Results") or []
        )

    # --- administration --------------------------------------------------------

    async def queue_arn(self, url: str) -> str:
        if url not in self._arns:
            resp = await self._call(
                "get_queue_attributes", QueueUrl=url, AttributeNames=["QueueArn"]
            )
            self._arns[url] = str(resp["Attributes"]["QueueArn"])
        return self._arns[url]

    async def depth(self, url: str | None = None) -> dict[str, int]:
        resp = await self._call(
            "get_queue_attributes",
            QueueUrl=url or self.settings.queue,
            AttributeNames=[
                "ApproximateNumberOfMessages",
                "ApproximateNumberOfMessagesNotVisible",
                "ApproximateNumberOfMessagesDelayed",
            ],
        )
        return {k: int(v) for k, v in resp["Attributes"].items()}

    async def dead_letter_depth(self) -> dict[str, int]:
        return await self.depth(self.settings.dlq)

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


def _foreign_attributes(own: Mapping[str, Mapping[str, Any]], reason: str) -> dict[str, Any]:
    """A foreign message's own attributes and the reason, within SQS's 10 per message.

    Attributes spelled like ours (``tasklease-*``) are not carried over: the reason is
    written anew and a foreign message never gets the redrive marker. When more than 9
    remain, the first 9 in name order are kept and the reason names the ones dropped."""
    kept = {
        name: {k: v for k, v in value.items() if k in _ATTR_KEYS}
        for name, value in sorted(own.items())
        if not name.startswith(codec.ATTR_PREFIX)
    }
    room = MAX_MESSAGE_ATTRIBUTES - 1
    dropped = list(kept)[room:]
    if dropped:
        kept = dict(list(kept.items())[:room])
        note = f" (attributes dropped, SQS keeps {MAX_MESSAGE_ATTRIBUTES}: {', '.join(dropped)})"
        reason = reason[: max(0, codec.MAX_REASON_CHARS - len(note))] + note
    return {**kept, codec.ATTR_REASON: _string(reason[: codec.MAX_REASON_CHARS])}
