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

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from app.priorities import Priority, Route

# One received message, in the shape the module docstring describes.
Message = dict[str, Any]


@dataclass(frozen=True)
class QueueUrls:
    """Where a deployment's queues are: what TASKLEASE_QUEUE_URL and _DLQ_URL hold, and
    the high and low queues' _HIGH and _LOW ones (None where not made)."""

    queue_url: str
    dlq_url: str
    queue_url_high: str | None = None
    dlq_url_high: str | None = None
    queue_url_low: str | None = None
    dlq_url_low: str | None = None

    def settings(self) -> dict[str, str]:
        """As Settings fields (the ones made)."""
        return {k: v for k, v in vars(self).items() if v}

    def env(self) -> dict[str, str]:
        """As TASKLEASE_* variables (the ones made)."""
        return {"TASKLEASE_" + k.upper(): v for k, v in self.settings().items()}


@runtime_checkable
class Transport(Protocol):
    """An open connection to the source queues (one per priority, or one for all) and
    their dead-letter queues. A job's message goes to its priority's queue; a received
    message is deleted or re-timed on the queue it came from (the carrier remembers it);
    the dead-letter methods see every DLQ as one.

    Every failure to reach the carrier raises errors.QueueError naming the operation.
    Batch calls return what failed instead of raising for part of a batch."""

    async def open(self) -> None: ...

    async def close(self) -> None: ...

    # --- the source queue ------------------------------------------------------

    async def send_jobs(
        self,
        routes: Sequence[Route],
        *,
        delay_seconds: float = 0,
        traces: Mapping[str, str | None] | None = None,
    ) -> list[str]:
        """Wake the jobs up: one message each on its priority's queue, in its tenant's
        message group, visible after ``delay_seconds``, carrying its job's trace context
        from ``traces`` (job id -> W3C traceparent) where given. Returns the job ids whose
        message was not sent."""
        ...

    def priorities(self) -> tuple[Priority, ...]:
        """The priorities with a source queue of their own (just normal when all share one)."""
        ...

    async def receive(
        self,
        *,
        max_messages: int,
        wait_seconds: int,
        visibility: int | None = None,
        priority: Priority = Priority.NORMAL,
    ) -> list[Message]:
        """Up to ``max_messages`` from ``priority``'s queue, waiting up to ``wait_seconds``
        for the first (long poll); each is invisible for ``visibility`` seconds (the
        queue's default when None)."""
        ...

    def remember(self, records: Sequence[Mapping[str, Any]]) -> None:
        """Learn which queue each record of an event came from (its eventSourceARN), for
        messages received by someone else (Lambda's event source mapping)."""
        ...

    def forget(self, receipt_handles: Sequence[str]) -> None:
        """The batch is done: stop remembering where these messages came from."""
        ...

    async def delete_batch(self, receipt_handles: Sequence[str]) -> list[str]:
        """Delete received messages; returns the handles that were not deleted."""
        ...

    async def change_visibility(self, receipt_handle: str, seconds: float) -> None:
        """Make a received message visible again after ``seconds`` (the lease)."""
        ...

    async def source_arn(self, priority: Priority = Priority.NORMAL) -> str:
        """A source queue's name as the records of an event carry it (eventSourceARN)."""
        ...

    # --- the dead-letter queue -------------------------------------------------

    async def send_dead_letter(
        self,
        route: Route,
        reason: str,
        *,
        generation: int = 0,
        traceparent: str | None = None,
    ) -> None:
        """A job's dead letter, on the DLQ paired with its priority's queue, in its
        tenant's message group, with the marker, the reason, the redrive generation and
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
        """Put dead letters back on the source queue paired with the DLQ each came from,
        with their attributes, marked as moved; returns the MessageIds that failed. The caller deletes the sent ones from the DLQ."""
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
        """The source queues' approximate counts, summed: visible, in flight and delayed
        (``ApproximateNumberOfMessages``, ``…NotVisible``, ``…Delayed``)."""
        ...

    async def dead_letter_depth(self) -> dict[str, int]:
        """Like depth, for the dead-letter queues."""
        ...

    async def create_queues(self, name: str) -> QueueUrls:
        """Create (or find) the source queues and their DLQs, each DLQ its source's
        redrive target."""
        ...
