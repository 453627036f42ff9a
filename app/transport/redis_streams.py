"""The Redis Streams carrier: the same claim checks as on SQS, on streams (docs/explain/design.md#redis).

The mapping (each step is one Lua script in redis_scripts, so atomic):

- a queue is a stream with one consumer group; a receive is XREADGROUP ... BLOCK (the
  long poll), after the step that moves due delayed messages onto the stream and takes
  over expired leases (XAUTOCLAIM: the redelivery);
- the lease is the pending entry: its idle time plays the visibility timeout (the
  stream's is TASKLEASE_VISIBILITY_TIMEOUT_SECONDS); a heartbeat resets it (XCLAIM ...
  IDLE 0 JUSTID); a shorter visibility sets the idle time so that the entry comes back
  when asked; a longer one (a retry's backoff) moves it to the delayed sorted set;
- the delivery count XPENDING reports (plus the receives before a re-scheduling) plays
  ApproximateReceiveCount, and past TASKLEASE_MAX_RECEIVE_COUNT an entry moves to the
  dead-letter stream, as SQS's redrive policy would;
- delete is XACK + XDEL, only for the handle of the newest delivery;
- a receipt handle is ``stream|id|delivery count``: it names its queue, so nothing is
  remembered between a receive and a delete.

The database stays the truth: a message is only a wake-up call, and a message lost with a
Redis that kept nothing on disk is sent again by the sweeper (docs/explain/design.md#redis).
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import Mapping, Sequence
from typing import Any

from app import errors, metrics
from app.priorities import ORDER, Priority, Route
from app.settings import aws_limits as limits
from app.transport import codec
from app.transport import sqs_shapes as shapes
from app.transport.base import Message, QueueUrls
from app.transport.redis_connection import (
    BLOCK_SLICE_MS,
    RedisConnection,
)
from app.transport.redis_entries import (
    GROUP,
    fields_for,
    flat,
    parse_handle,
    typed,
)

__all__ = ["GROUP", "RedisTransport", "fields_for"]


class RedisTransport(RedisConnection):
    """The Transport on Redis Streams (the module docstring has the mapping)."""

    # --- the source queue ------------------------------------------------------

    async def _add(self, stream: str, entries: Sequence[Mapping[str, str]], delay_ms: int) -> None:
        if delay_ms <= 0:
            metrics.count(metrics.REDIS_REQUESTS, step="XADD")
            async with self.client.pipeline(transaction=False) as pipe:
                for fields in entries:
                    pipe.xadd(stream, typed(fields))
                await self._do("XADD", pipe.execute())
            return
        members = [
            json.dumps({"f": flat(f), "n": uuid.uuid4().hex}, separators=(",", ":"))
            for f in entries
        ]
        await self._script("SEND_DELAYED", [stream, f"{stream}:delayed"], [delay_ms, *members])

    async def send_jobs(
        self,
        routes: Sequence[Route],
        *,
        delay_seconds: float = 0,
        traces: Mapping[str, str | None] | None = None,
    ) -> list[str]:
        """One entry per job on its priority's stream (one pipeline per stream), or on
        its delayed set when ``delay_seconds`` > 0; returns the job ids not sent."""
        delay_ms = int(max(0.0, min(delay_seconds, limits.MAX_DELAY_SECONDS)) * 1000)
        traces = traces or {}
        failed: list[str] = []
        for priority in ORDER:
            mine = [r for r in routes if r.priority == priority]
            if not mine:
                continue
            entries = [
                fields_for(
                    codec.body_for(r.job_id),
                    codec.trace_attributes(traces.get(str(r.job_id))),
                    tenant=r.tenant,
                )
                for r in mine
            ]
            try:
                await self._add(self.queues.source(priority), entries, delay_ms)
            except errors.QueueError:
                failed.extend(str(r.job_id) for r in mine)
        return failed

    def priorities(self) -> tuple[Priority, ...]:
        return self.queues.priorities()

    async def receive(
        self,
        *,
        max_messages: int,
        wait_seconds: int,
        visibility: int | None = None,
        priority: Priority = Priority.NORMAL,
        url: str | None = None,
    ) -> list[Message]:
        """Take over expired leases and move due delayed messages (the TAKE script), then
        XREADGROUP new entries, blocking up to ``wait_seconds`` in slices (each slice looks
        again for redeliveries and due messages). TAKE runs at most every
        TAKE_INTERVAL_SECONDS per stream and process while receives find messages, and
        always before an empty answer: a busy poller pays one round trip per receive."""
        stream = url or self.queues.source(priority)
        await self._ensure_group(stream)
        deadline = time.monotonic() + wait_seconds
        force = False
        while True:
            took = force or self._take_due(stream)
            got, next_due = (
                await self._take(stream, max_messages) if took else ([], self._due_in(stream))
            )
            room = max_messages - len(got)
            remaining_ms = int((deadline - time.monotonic()) * 1000)
            block: int | None = None
            if not got and remaining_ms > 0:
                # Never 0: BLOCK 0 would wait forever.
                due = [next_due] if next_due >= 0 else []
                block = max(1, min(remaining_ms, BLOCK_SLICE_MS, *due))
            if room > 0:
                got += await self._read(stream, room, block)
            if got or (remaining_ms <= 0 and took):
                break
            force = True  # the next slice, or a last look before answering nothing
        # A visibility other than the stream's sets each entry's idle time; one longer
        # than the stream's is cut to it (a heartbeat extends a lease, as on SQS).
        if visibility is not None and got and visibility * 1000 < self._visibility_ms(stream):
            for m in got:
                await self.change_visibility(m["ReceiptHandle"], visibility)
        return got

    def remember(self, records: Sequence[Mapping[str, Any]]) -> None:
        """Nothing to remember: a receipt handle names its stream."""

    def forget(self, receipt_handles: Sequence[str]) -> None:
        """Nothing remembered."""

    async def delete_batch(self, receipt_handles: Sequence[str]) -> list[str]:
        """XACK + XDEL, one script per stream; a stale handle deletes nothing and is no
        failure (the entry was delivered again: its newest holder deletes it)."""
        by_stream: dict[str, list[tuple[str, str, int]]] = {}
        for h in receipt_handles:
            try:
                stream, entry_id, count = parse_handle(h)
            except errors.QueueError:
                by_stream.setdefault("", []).append((h, "", 0))
                continue
            by_stream.setdefault(stream, []).append((h, entry_id, count))
        failed = [h for h, _, _ in by_stream.pop("", [])]
        for stream, items in by_stream.items():
            args: list[Any] = [GROUP]
            for _, entry_id, count in items:
                args += [entry_id, count]
            try:
                await self._script("DELETE", [stream], args)
            except errors.QueueError:
                failed.extend(h for h, _, _ in items)
        return failed

    async def change_visibility(self, receipt_handle: str, seconds: float) -> None:
        stream, entry_id, count = parse_handle(receipt_handle)
        delay_ms = int(max(0.0, min(seconds, limits.MAX_VISIBILITY_SECONDS)) * 1000)
        ok = await self._script(
            "CHANGE_VISIBILITY",
            [stream, f"{stream}:delayed"],
            [GROUP, self.consumer, entry_id, count, delay_ms, self._visibility_ms(stream)],
        )
        if not ok:
            raise errors.QueueError(
                f"Redis change_visibility: the receipt handle {receipt_handle!r} is no longer "
                "valid (the message was delivered again or deleted)"
            )

    async def source_arn(self, priority: Priority = Priority.NORMAL) -> str:
        """The stream's name as records carry it; asking makes sure Redis answers and the
        group exists (a worker is ready once it can poll, as on SQS)."""
        stream = self.queues.source(priority)
        await self._ensure_group(stream, force=True)
        return f"redis:{stream}"

    # --- the dead-letter queue -------------------------------------------------

    async def send_dead_letter(
        self,
        route: Route,
        reason: str,
        *,
        generation: int = 0,
        traceparent: str | None = None,
    ) -> None:
        """An entry on the dead-letter stream paired with the job's priority, carrying
        the marker, the reason, the generation and the trace context, as on SQS."""
        attrs = shapes.dead_letter_attributes(route.job_id, reason, generation, traceparent)
        fields = fields_for(
            codec.body_for(route.job_id), attrs, tenant=route.tenant, why=reason or "unknown"
        )
        await self._do("XADD", self.client.xadd(self.queues.dlq(route.priority), typed(fields)))

    async def send_raw_dead_letter(
        self, body: str, reason: str, *, attributes: Mapping[str, Mapping[str, Any]] | None = None
    ) -> None:
        attrs = shapes.foreign_attributes(attributes or {}, reason)
        fields = fields_for(body or "(empty)", attrs, why=reason)
        await self._do("XADD", self.client.xadd(self.settings.dlq, typed(fields)))

    async def receive_dead_letters(
        self, *, max_messages: int, wait_seconds: int, visibility: int | None = None
    ) -> list[Message]:
        """From every dead-letter stream: a short read of each, then, when none answered,
        a long poll of the normal one's (like the SQS carrier's)."""
        dlqs = self.queues.dlqs()
        for wait in (0, wait_seconds) if len(dlqs) > 1 else (wait_seconds,):
            answers = await asyncio.gather(
                *(
                    self.receive(
                        url=d,
                        max_messages=max_messages,
                        wait_seconds=wait,
                        visibility=visibility,
                    )
                    for d in dlqs
                )
            )
            messages = [m for answer in answers for m in answer]
            if messages:
                return messages
        return []

    async def delete_dead_letters(self, receipt_handles: Sequence[str]) -> list[str]:
        return await self.delete_batch(receipt_handles)

    async def release_dead_letters(self, receipt_handles: Sequence[str]) -> list[str]:
        failed: list[str] = []
        for h in receipt_handles:
            try:
                await self.change_visibility(h, 0)
            except errors.QueueError:
                failed.append(h)
        return failed

    async def send_moved(self, messages: Sequence[Mapping[str, Any]]) -> list[str]:
        """Each dead letter back on the source stream paired with its dead-letter stream,
        with its attributes (our marker added when the backstop moved it) and tenant; the
        add and the dead letter's delete are one step. Returns the MessageIds that failed."""
        by_dlq: dict[str, list[Mapping[str, Any]]] = {}
        for m in messages:
            stream, _, _ = parse_handle(str(m["ReceiptHandle"]))
            by_dlq.setdefault(stream, []).append(m)
        failed: list[str] = []
        for dlq, mine in by_dlq.items():
            args: list[Any] = [GROUP]
            for i, m in enumerate(mine):
                entry = shapes.moved_entry(i, m)
                fields = fields_for(
                    entry["MessageBody"],
                    entry["MessageAttributes"],
                    tenant=entry.get("MessageGroupId"),
                )
                _, entry_id, count = parse_handle(str(m["ReceiptHandle"]))
                args += [entry_id, count, json.dumps(flat(fields), separators=(",", ":"))]
            try:
                moved = await self._script("MOVE_BACK", [self.queues.source_of_dlq(dlq), dlq], args)
            except errors.QueueError:
                failed.extend(str(m["MessageId"]) for m in mine)
                continue
            done = set(moved)
            failed.extend(str(m["MessageId"]) for m in mine if m["MessageId"] not in done)
        return failed

    async def start_move(self, *, rate: int | None = None) -> str | None:
        """Redis has no move task: the caller moves the dead letters itself."""
        return None

    async def move_status(self) -> dict[str, Any]:
        return {}

    async def move_running(self) -> bool:
        return False

    # --- administration --------------------------------------------------------

    async def _depth(self, stream: str) -> dict[str, int]:
        """A stream's counts as SQS reports them (redis_scripts.DEPTH): an expired lease
        and a due delayed message count as visible, which is what the next receive takes."""
        visible, in_flight, delayed = await self._script(
            "DEPTH", [stream, f"{stream}:delayed"], [GROUP, self._visibility_ms(stream), 10_000]
        )
        return {
            "ApproximateNumberOfMessages": max(0, int(visible)),
            "ApproximateNumberOfMessagesNotVisible": max(0, int(in_flight)),
            "ApproximateNumberOfMessagesDelayed": max(0, int(delayed)),
        }

    async def depth(self, url: str | None = None) -> dict[str, int]:
        """The source streams' counts, summed (or ``url``'s alone, as on SQS)."""
        if url is not None:
            return await self._depth(url)
        return shapes.summed([await self._depth(s) for s in self.queues.sources()])

    async def dead_letter_depth(self) -> dict[str, int]:
        return shapes.summed([await self._depth(s) for s in self.queues.dlqs()])

    async def create_queues(self, name: str) -> QueueUrls:
        """The streams (``name``, ``name-high``, ``name-low``, each with ``-dlq``) and
        their consumer groups; the names are the "URLs" the settings take."""
        names = {p: name if p == Priority.NORMAL else f"{name}-{p}" for p in ORDER}
        for stream in names.values():
            await self._ensure_group(stream, force=True)
            await self._ensure_group(f"{stream}-dlq", force=True)
        return QueueUrls(
            queue_url=names[Priority.NORMAL],
            dlq_url=f"{names[Priority.NORMAL]}-dlq",
            queue_url_high=names[Priority.HIGH],
            dlq_url_high=f"{names[Priority.HIGH]}-dlq",
            queue_url_low=names[Priority.LOW],
            dlq_url_low=f"{names[Priority.LOW]}-dlq",
        )
