"""The carrier's contract: what the engine, the services and the tooling ask of the queue.

A carrier moves claim checks (app/transport/codec.py) between the API, the workers and a
dead-letter queue; visibility is the lease. SQS is the one carrier today
(app/transport/sqs.py); another (Redis Streams) is a sibling module implementing
``Transport``, and no caller changes.

A received message keeps the shape ReceiveMessage gives it, which every carrier produces:
``MessageId``, ``ReceiptHandle`` (what delete and change_visibility take), ``Body``,
``MessageAttributes`` (name -> ``{"DataType", "StringValue"}``) and ``Attributes`` (the
carrier's own, such as ``ApproximateReceiveCount`` and ``SentTimestamp``).
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

# One received message, in the shape the module docstring describes.
Message = dict[str, Any]


@dataclass(frozen=True)
class QueueUrls:
    """Where a deployment's two queues are: what TASKLEASE_QUEUE_URL and _DLQ_URL hold."""

    queue_url: str
    dlq_url: str


@runtime_checkable
class Transport(Protocol):
    """An open connection to the source queue and its dead-letter queue.

    Every failure to reach the carrier raises errors.QueueError naming the operation.
    Batch calls return what failed instead of raising for part of a batch."""

    async def open(self) -> None: ...

    async def close(self) -> None: ...

    # --- the source queue ------------------------------------------------------

    async def send_jobs(
        self,
        job_ids: Sequence[uuid.UUID | str],
        *,
        delay_seconds: float = 0,
        traces: Mapping[str, str | None] | None = None,
    ) -> list[str]:
        """Wake the jobs up: one message each, visible after ``delay_seconds``, carrying
        its job's trace context from ``traces`` (job id -> W3C traceparent) where given.
        Returns the job ids whose message was not sent."""
        ...

    async def receive(
        self, *, max_messages: int, wait_seconds: int, visibility: int | None = None
    ) -> list[Message]:
        """Up to ``max_messages``, waiting up to ``wait_seconds`` for the first (long poll);
        each is invisible for ``visibility`` seconds (the queue's default when None)."""
        ...

    async def delete_batch(self, receipt_handles: Sequence[str]) -> list[str]:
        """Delete received messages; returns the handles that were not deleted."""
        ...

    async def change_visibility(self, receipt_handle: str, seconds: float) -> None:
        """Make a received message visible again after ``seconds`` (the lease)."""
        ...

    async def source_arn(self) -> str:
        """The source queue's name as the records of an event carry it (eventSourceARN)."""
        ...

    # --- the dead-letter queue -------------------------------------------------

    async def send_dead_letter(
        self,
        job_id: uuid.UUID | str,
        reason: str,
        *,
        generation: int = 0,
        traceparent: str | None = None,
    ) -> None:
        """A job's dead letter, with the marker, the reason, the redrive generation and
        the job's trace context."""
        ...

    async def send_raw_dead_letter(
        self, body: str, reason: str, *, attributes: Mapping[str, Mapping[str, Any]] | None = None
    ) -> None:
        """A message that is not ours, dead-lettered as it came: its body and its own
        ``attributes`` (codec.message_attributes), with the reason beside them."""
        ...

    async def receive_dead_letters(
        self, *, max_messages: int, wait_seconds: int, visibility: int | None = None
    ) -> list[Message]:
        """Like receive, from the dead-letter queue."""
        ...

    async def delete_dead_letters(self, receipt_handles: Sequence[str]) -> list[str]:
        """Like delete_batch, on the dead-letter queue."""
        ...

    async def release_dead_letters(self, receipt_handles: Sequence[str]) -> list[str]:
        """Make received dead letters visible again now; returns the handles that failed."""
        ...

    async def send_moved(self, messages: Sequence[Mapping[str, Any]]) -> list[str]:
        """Put dead letters back on the source queue with their attributes, marked as moved;
        returns the MessageIds that failed. The caller deletes the sent ones from the DLQ."""
        ...

    async def start_move(self, *, rate: int | None = None) -> str | None:
        """Have the carrier move every dead letter back itself; returns the task's handle,
        or None where the carrier cannot (then the caller uses send_moved)."""
        ...

    async def move_status(self) -> dict[str, Any]:
        """The newest move task: ``Status``, ``ApproximateNumberOfMessagesMoved``, ..."""
        ...

    async def move_running(self) -> bool:
        """Whether a move task is taking messages off the dead-letter queue now; False
        where the carrier has no move tasks (they can then never be running)."""
        ...

    # --- administration --------------------------------------------------------

    async def depth(self) -> dict[str, int]:
        """The source queue's approximate counts: visible, in flight and delayed
        (``ApproximateNumberOfMessages``, ``…NotVisible``, ``…Delayed``)."""
        ...

    async def dead_letter_depth(self) -> dict[str, int]:
        """Like depth, for the dead-letter queue."""
        ...

    async def create_queues(self, name: str) -> QueueUrls:
        """Create (or find) the source queue and its DLQ, the DLQ as its redrive target."""
        ...
