"""The SQS carrier: claim checks in batches of ten, visibility as the lease, aiobotocore.

The endpoint comes from botocore's own variables (``AWS_ENDPOINT_URL_SQS`` or
``AWS_ENDPOINT_URL``), so AWS, LocalStack and moto's server need no code change.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
from collections.abc import Mapping, Sequence
from typing import Any

import botocore.exceptions
from aiobotocore.session import get_session
from botocore.config import Config

from app import errors, metrics
from app.priorities import ORDER, Priority, Route
from app.settings import aws_limits as limits
from app.settings.config import Settings
from app.transport import codec, sqs_create
from app.transport import sqs_shapes as shapes
from app.transport.base import Message, QueueUrls
from app.transport.queues import QueueSet

# StartMessageMoveTask moves at most 500 messages per second.
MAX_MOVE_RATE = 500
_UNSUPPORTED = {
    "InvalidAction",
    "UnsupportedOperation",
    "NotImplemented",
    "AWS.SimpleQueueService.UnsupportedOperation",
}


class SqsTransport:
    """An open SQS client bound to the priorities' source queues and their dead-letter
    queues (one pair when TASKLEASE_QUEUE_URL_HIGH/_LOW are unset): a job's message goes
    to its priority's queue, a received message is deleted or re-timed on the queue it
    came from, and the DLQ methods see every dead-letter queue as one.

    The optional ``url`` arguments (another queue than the source) serve callers written
    before the Transport protocol; the protocol's DLQ methods replace them."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.queues = QueueSet(settings)
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

    async def _send_batch(self, entries: list[dict[str, Any]], url: str | None = None) -> list[int]:
        """One SendMessageBatch to ``url`` (the normal source queue); the indexes of the
        entries that failed (all of them when the call itself failed)."""
        try:
            resp = await self._call(
                "send_message_batch", QueueUrl=url or self.settings.queue, Entries=entries
            )
        except errors.QueueError:
            return list(range(len(entries)))
        return [int(f["Id"]) for f in resp.get("Failed", [])]

    # --- the source queue ------------------------------------------------------

    async def send_jobs(
        self,
        routes: Sequence[Route],
        *,
        delay_seconds: float = 0,
        traces: Mapping[str, str | None] | None = None,
    ) -> list[str]:
        """Send one message per job to its priority's queue, in its tenant's message group,
        in batches of 10, each with its job's trace context (``traces``: job id ->
        traceparent); returns the job ids that failed."""
        # Whole seconds, rounded up like visibility, within SendMessage's 15 minutes.
        delay = math.ceil(max(0, min(delay_seconds, limits.MAX_DELAY_SECONDS)))
        extra = {"DelaySeconds": delay} if delay else {}
        traces = traces or {}
        failed: list[str] = []
        for priority in ORDER:
            mine = [r for r in routes if r.priority == priority]
            for chunk in shapes.chunks(mine):
                entries = [
                    {"Id": str(i), "MessageBody": codec.body_for(r.job_id), **extra}
                    | shapes.group(r.tenant)
                    | shapes.with_attributes(codec.trace_attributes(traces.get(str(r.job_id))))
                    for i, r in enumerate(chunk)
                ]
                url = self.queues.source(priority)
                failed.extend(str(chunk[i].job_id) for i in await self._send_batch(entries, url))
        return failed

    def priorities(self) -> tuple[Priority, ...]:
        return self.queues.priorities()

    async def receive(
        self,
        *,
        max_messages: int,
        wait_seconds: int,
        url: str | None = None,
        visibility: int | None = None,
        priority: Priority = Priority.NORMAL,
    ) -> list[Message]:
        url = url or self.queues.source(priority)
        extra = {} if visibility is None else {"VisibilityTimeout": visibility}
        resp = await self._call(
            "receive_message",
            QueueUrl=url,
            **extra,
            MaxNumberOfMessages=max_messages,
            WaitTimeSeconds=wait_seconds,
            MessageSystemAttributeNames=["All"],
            MessageAttributeNames=["All"],
        )
        messages = list(resp.get("Messages", []))
        for m in messages:
            self.queues.remember(m["ReceiptHandle"], url)
        return messages

    def remember(self, records: Sequence[Mapping[str, Any]]) -> None:
        self.queues.remember_records(records)

    def forget(self, receipt_handles: Sequence[str]) -> None:
        self.queues.forget(receipt_handles)

    async def delete_batch(
        self, receipt_handles: Sequence[str], *, url: str | None = None
    ) -> list[str]:
        """Delete in batches of 10, each on the queue it came from; returns the handles
        that failed."""
        return await self._by_handle("delete_message_batch", receipt_handles, url)

    async def _by_handle(
        self, op: str, receipt_handles: Sequence[str], default: str | None, **entry: Any
    ) -> list[str]:
        """A *Batch call on received messages, in batches of 10, each batch on the queue
        its messages came from (``default`` for a handle not known); returns the handles
        that failed. The others are done with: forgotten."""
        failed: list[str] = []
        for url, handles in self.queues.by_queue(receipt_handles, default).items():
            for chunk in shapes.chunks(handles):
                entries = [{"Id": str(i), "ReceiptHandle": h, **entry} for i, h in enumerate(chunk)]
                try:
                    resp = await self._call(op, QueueUrl=url, Entries=entries)
                except errors.QueueError:
                    failed.extend(chunk)
                    continue
                failed.extend(chunk[int(f["Id"])] for f in resp.get("Failed", []))
        self.queues.forget(set(receipt_handles) - set(failed))
        return failed

    async def change_visibility(
        self, receipt_handle: str, seconds: float, *, url: str | None = None
    ) -> None:
        # Whole seconds, rounded up: a backoff of 0.4 s rounded down would bring the
        # message back at once.
        seconds = math.ceil(max(0, min(seconds, limits.MAX_VISIBILITY_SECONDS)))
        await self._call(
            "change_message_visibility",
            QueueUrl=self.queues.where(receipt_handle, url),
            ReceiptHandle=receipt_handle,
            VisibilityTimeout=seconds,
        )

    async def source_arn(self, priority: Priority = Priority.NORMAL) -> str:
        return await self.queue_arn(self.queues.source(priority))

    # --- the dead-letter queue -------------------------------------------------

    async def send_dead_letter(
        self,
        route: Route,
        reason: str,
        *,
        generation: int = 0,
        traceparent: str | None = None,
    ) -> None:
        """A new message on the DLQ paired with the job's queue, in its tenant's group,
        carrying the marker, the reason and the job's trace context (a redrive moves it
        back with its attributes)."""
        job_id = route.job_id
        await self._call(
            "send_message",
            QueueUrl=self.queues.dlq(route.priority),
            MessageBody=codec.body_for(job_id),
            **shapes.group(route.tenant),
            MessageAttributes=shapes.dead_letter_attributes(
                job_id, reason, generation, traceparent
            ),
        )

    async def send_raw_dead_letter(
        self, body: str, reason: str, *, attributes: Mapping[str, Mapping[str, Any]] | None = None
    ) -> None:
        """A message that is not ours goes to the DLQ as it came, its own attributes beside
        the reason (see sqs_shapes.foreign_attributes for what does not fit)."""
        await self._call(
            "send_message",
            QueueUrl=self.settings.dlq,
            MessageBody=body or "(empty)",
            MessageAttributes=shapes.foreign_attributes(attributes or {}, reason),
        )

    async def receive_dead_letters(
        self, *, max_messages: int, wait_seconds: int, visibility: int | None = None
    ) -> list[Message]:
        """From every dead-letter queue at once: a short poll of each, then, when none
        answered, a long poll of each (so an empty answer costs ``wait_seconds`` once)."""
        dlqs = self.queues.dlqs()
        for wait in (0, wait_seconds) if len(dlqs) > 1 else (wait_seconds,):
            answers = await asyncio.gather(
                *(
                    self.receive(
                        url=url, max_messages=max_messages, wait_seconds=wait, visibility=visibility
                    )
                    for url in dlqs
                )
            )
            messages = [m for answer in answers for m in answer]
            if messages:
                return messages
        return []

    async def delete_dead_letters(self, receipt_handles: Sequence[str]) -> list[str]:
        return await self.delete_batch(receipt_handles, url=self.settings.dlq)

    async def release_dead_letters(self, receipt_handles: Sequence[str]) -> list[str]:
        """ChangeMessageVisibilityBatch to 0 in batches of 10, each on the DLQ it came
        from; returns the handles that failed."""
        return await self._by_handle(
            "change_message_visibility_batch",
            receipt_handles,
            self.settings.dlq,
            VisibilityTimeout=0,
        )

    async def send_moved(self, messages: Sequence[Mapping[str, Any]]) -> list[str]:
        """Send DLQ messages to the source queue paired with the DLQ each came from, as
        they were, attributes and message group and all; a message without our marker (SQS
        moved it by the redrive policy) gets one. Returns the MessageIds that failed."""
        by_source: dict[str, list[Mapping[str, Any]]] = {}
        for m in messages:
            dlq = self.queues.where(m["ReceiptHandle"], self.settings.dlq)
            by_source.setdefault(self.queues.source_of_dlq(dlq), []).append(m)
        failed: list[str] = []
        for url, mine in by_source.items():
            for chunk in shapes.chunks(mine):
                entries = [shapes.moved_entry(i, m) for i, m in enumerate(chunk)]
                failed.extend(chunk[i]["MessageId"] for i in await self._send_batch(entries, url))
        return failed

    async def start_move(self, *, rate: int | None = None) -> str | None:
        """StartMessageMoveTask from each DLQ back to its source queue, the destination
        named (LocalStack fails the task without one for messages SQS did not move itself).
        Returns the task handles (comma-separated), or None where the endpoint does not
        implement it (moto)."""
        handles: list[str] = []
        for p in self.queues.priorities():
            params: dict[str, Any] = {
                "SourceArn": await self.queue_arn(self.queues.dlq(p)),
                "DestinationArn": await self.queue_arn(self.queues.source(p)),
            }
            if rate:
                params["MaxNumberOfMessagesPerSecond"] = min(rate, MAX_MOVE_RATE)
            resp = await self._call_if_supported("start_message_move_task", **params)
            if resp is None:
                return None
            handles.append(str(resp.get("TaskHandle", "")))
        return ",".join(handles)

    async def move_status(self) -> dict[str, Any]:
        """The newest move task of each DLQ, as one (LocalStack lists TaskHandle only while
        running): RUNNING while any runs, FAILED or CANCELLED if one did, else COMPLETED;
        the counts summed."""
        tasks: list[dict[str, Any]] = []
        for url in self.queues.dlqs():
            resp = await self._call(
                "list_message_move_tasks", SourceArn=await self.queue_arn(url), MaxResults=1
            )
            tasks.extend(dict(t) for t in (resp.get("Results") or [])[:1])
        return shapes.one_status(tasks)

    async def move_running(self) -> bool:
        """ListMessageMoveTasks on each DLQ: is a newest task RUNNING? False where the
        endpoint does not implement it (moto), which then cannot run one either."""
        for url in self.queues.dlqs():
            resp = await self._call_if_supported(
                "list_message_move_tasks", SourceArn=await self.queue_arn(url), MaxResults=1
            )
            if resp is None:
                return False
            if any(t.get("Status") == "RUNNING" for t in resp.get("Results") or []):
                return True
        return False

    # --- administration --------------------------------------------------------

    async def queue_arn(self, url: str) -> str:
        if url not in self._arns:
            resp = await self._call(
                "get_queue_attributes", QueueUrl=url, AttributeNames=["QueueArn"]
            )
            self._arns[url] = str(resp["Attributes"]["QueueArn"])
        return self._arns[url]

    async def depth(self, url: str | None = None) -> dict[str, int]:
        """The source queues' counts, summed (or ``url``'s alone)."""
        if url is None:
            return shapes.summed(
                await asyncio.gather(*(self.depth(u) for u in self.queues.sources()))
            )
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

    async def dead_letter_depth(self) -> dict[str, int]:
        """Every DLQ's counts, summed."""
        return shapes.summed(await asyncio.gather(*(self.depth(u) for u in self.queues.dlqs())))

    async def create_queues(self, name: str) -> QueueUrls:
        """Create (or find) the three source queues and their DLQs (sqs_create)."""
        return await sqs_create.create_queues(self, name)
