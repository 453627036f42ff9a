"""The Redis Streams carrier: the same claim checks as on SQS, on streams (README "Redis
Streams").

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
Redis that kept nothing on disk is sent again by the sweeper (README).
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import socket
import time
import uuid
from collections.abc import Mapping, Sequence
from typing import Any

import redis.asyncio as aioredis
import redis.exceptions
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff

from app import aws_limits as limits
from app import errors, metrics
from app.config import Settings
from app.priorities import ORDER, Priority, Route
from app.transport import codec, redis_scripts
from app.transport.base import Message, QueueUrls
from app.transport.queues import QueueSet

GROUP = "tasklease"
# A blocked XREADGROUP wakes at least this often to move due delayed messages and take
# over expired leases (a delayed message is due at most this late).
BLOCK_SLICE_MS = 1000
# Connections per process, and how long a command may wait for an answer (or for a
# free connection).
MAX_CONNECTIONS = 64
SOCKET_TIMEOUT_SECONDS = 10
# Due delayed messages moved onto the stream per receive, at most.
PROMOTE_LIMIT = 100
# The dead-letter streams' visibility timeout: the redrive walk's and the sweeper's.
DLQ_VISIBILITY_SECONDS = 30


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


class RedisTransport:
    """An open Redis connection pool bound to the priorities' streams and their
    dead-letter streams (names from TASKLEASE_QUEUE_URL and the others: on this carrier
    they are stream keys)."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.queues = QueueSet(settings)
        self._client: aioredis.Redis | None = None
        self._scripts: dict[str, Any] = {}
        self.consumer = f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:6]}"
        self._groups: set[str] = set()

    async def open(self) -> None:
        self.settings.need("redis_url")
        # A blocking pool: more callers than connections wait for one rather than fail.
        # Every read is bounded (a receive blocks at most BLOCK_SLICE_MS at a time), so a
        # server that stopped answering is an error after SOCKET_TIMEOUT_SECONDS.
        pool = aioredis.BlockingConnectionPool.from_url(
            str(self.settings.redis_url),
            decode_responses=True,
            max_connections=MAX_CONNECTIONS,
            timeout=SOCKET_TIMEOUT_SECONDS,
            socket_connect_timeout=5,
            socket_timeout=SOCKET_TIMEOUT_SECONDS,
            health_check_interval=30,
            # After a Redis restart every pooled connection is dead: a command that meets
            # one is sent once more on a fresh connection instead of failing. (A retried
            # XADD may add a second entry, a retried take may leave entries pending until
            # their lease ends: both are duplicates the claim already tolerates.)
            retry=Retry(NoBackoff(), 1),
            retry_on_error=[redis.exceptions.ConnectionError],
        )
        self._client = aioredis.Redis.from_pool(pool)  # closing the client closes the pool
        for name in ("TAKE", "DELETE", "CHANGE_VISIBILITY", "SEND_DELAYED", "DEAD_LETTER", "DEPTH"):
            self._scripts[name] = self._client.register_script(getattr(redis_scripts, name))
        self._scripts["MOVE_BACK"] = self._client.register_script(redis_scripts.MOVE_BACK)

    async def close(self) -> None:
        if self._client is not None:
            await self._client.aclose()
        self._client = None

    @property
    def client(self) -> aioredis.Redis:
        if self._client is None:
            raise errors.QueueError("the Redis client is not open")
        return self._client

    async def _do(self, op: str, coro: Any) -> Any:
        try:
            return await coro
        except redis.exceptions.RedisError as exc:
            raise errors.QueueError(f"Redis {op}: {exc}") from exc

    async def _script(self, name: str, keys: list[str], args: list[Any]) -> Any:
        """A script on streams whose group may be gone (a Redis restarted with nothing on
        disk): the group is made again and the script run once more."""
        metrics.count(metrics.REDIS_REQUESTS, step=name)
        try:
            return await self._scripts[name](keys=keys, args=args)
        except redis.exceptions.ResponseError as exc:
            if "NOGROUP" not in str(exc):
                raise errors.QueueError(f"Redis {name}: {exc}") from exc
        except redis.exceptions.RedisError as exc:
            raise errors.QueueError(f"Redis {name}: {exc}") from exc
        for key in keys:
            if not key.endswith((":delayed", ":cursor")):
                await self._ensure_group(key, force=True)
        return await self._do(name, self._scripts[name](keys=keys, args=args))

    async def _ensure_group(self, stream: str, *, force: bool = False) -> None:
        if stream in self._groups and not force:
            return
        try:
            await self.client.xgroup_create(stream, GROUP, id="0", mkstream=True)
        except redis.exceptions.ResponseError as exc:
            if "BUSYGROUP" not in str(exc):
                raise errors.QueueError(f"Redis XGROUP CREATE {stream}: {exc}") from exc
        except redis.exceptions.RedisError as exc:
            raise errors.QueueError(f"Redis XGROUP CREATE {stream}: {exc}") from exc
        self._groups.add(stream)

    def _visibility_ms(self, stream: str) -> int:
        seconds = (
            DLQ_VISIBILITY_SECONDS
            if stream in self.queues.dlqs()
            else self.settings.visibility_timeout_seconds
        )
        return seconds * 1000

    # --- the source queue ------------------------------------------------------

    async def _add(self, stream: str, entries: Sequence[Mapping[str, str]], delay_ms: int) -> None:
        if delay_ms <= 0:
            metrics.count(metrics.REDIS_REQUESTS, step="XADD")
            async with self.client.pipeline(transaction=False) as pipe:
                for fields in entries:
                    pipe.xadd(stream, _typed(fields))
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
        """Take over expired leases and move due delayed messages, then XREADGROUP new
        entries, blocking up to ``wait_seconds`` in slices (each slice looks again for
        redeliveries and due messages)."""
        stream = url or self.queues.source(priority)
        await self._ensure_group(stream)
        deadline = time.monotonic() + wait_seconds
        while True:
            got, next_due = await self._take(stream, max_messages)
            room = max_messages - len(got)
            remaining_ms = int((deadline - time.monotonic()) * 1000)
            block: int | None = None
            if not got and remaining_ms > 0:
                # Never 0: BLOCK 0 would wait forever.
                block = max(
                    1, min(remaining_ms, BLOCK_SLICE_MS, *([next_due] if next_due >= 0 else []))
                )
            if room > 0:
                got += await self._read(stream, room, block)
            if got or remaining_ms <= 0:
                break
        # A visibility other than the stream's sets each entry's idle time; one longer
        # than the stream's is cut to it (a heartbeat extends a lease, as on SQS).
        if visibility is not None and got and visibility * 1000 < self._visibility_ms(stream):
            for m in got:
                await self.change_visibility(m["ReceiptHandle"], visibility)
        return got

    async def _take(self, stream: str, count: int) -> tuple[list[Message], int]:
        """The redeliveries (and the due delayed messages moved), and the ms until the next
        delayed message is due (-1: none)."""
        answer = await self._script(
            "TAKE",
            [stream, f"{stream}:delayed", f"{stream}:cursor", self._dlq_of(stream)],
            [
                GROUP,
                self.consumer,
                self._visibility_ms(stream),
                count,
                self._max_receives(stream),
                PROMOTE_LIMIT,
            ],
        )
        next_due = int(answer[0])
        out = [
            self._message(stream, str(entry_id), int(receives), _pairs(fields))
            for entry_id, receives, fields in answer[1:]
        ]
        return out, next_due

    async def _read(self, stream: str, count: int, block_ms: int | None) -> list[Message]:
        answer: Any
        metrics.count(metrics.REDIS_REQUESTS, step="XREADGROUP")
        try:
            answer = await self.client.xreadgroup(
                GROUP, self.consumer, {stream: ">"}, count=count, block=block_ms
            )
        except redis.exceptions.ResponseError as exc:
            if "NOGROUP" not in str(exc):
                raise errors.QueueError(f"Redis XREADGROUP: {exc}") from exc
            await self._ensure_group(stream, force=True)
            return []
        except redis.exceptions.RedisError as exc:
            raise errors.QueueError(f"Redis XREADGROUP: {exc}") from exc
        out: list[Message] = []
        for _, entries in answer or []:
            for entry_id, fields in entries:
                receives = 1 + int(fields.get("r", "0"))
                limit = self._max_receives(stream)
                if limit and receives > limit:
                    why = f"received {receives} times (maxReceiveCount {limit})"
                    await self._script(
                        "DEAD_LETTER",
                        [stream, self._dlq_of(stream)],
                        [GROUP, entry_id, 1, why],
                    )
                    continue
                out.append(self._message(stream, entry_id, receives, fields))
        return out

    def _message(
        self, stream: str, entry_id: str, receives: int, fields: Mapping[str, str]
    ) -> Message:
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

    def _dlq_of(self, stream: str) -> str:
        for p in self.queues.priorities():
            if self.queues.source(p) == stream:
                return self.queues.dlq(p)
        return self.settings.dlq

    def _max_receives(self, stream: str) -> int:
        """The redrive policy's backstop on a source stream; none on a dead-letter one."""
        return 0 if stream in self.queues.dlqs() else self.settings.max_receive_count

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
        return f"redis:{self.queues.source(priority)}"

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
        from app.transport import sqs_shapes as shapes

        attrs = {
            codec.ATTR_DEAD_LETTERED_AT: shapes.string(shapes.now()),
            codec.ATTR_REASON: shapes.string((reason or "unknown")[: codec.MAX_REASON_CHARS]),
            codec.ATTR_JOB_ID: shapes.string(str(route.job_id)),
            codec.ATTR_GENERATION: {"DataType": "Number", "StringValue": str(generation)},
            **codec.trace_attributes(traceparent),
        }
        fields = fields_for(
            codec.body_for(route.job_id), attrs, tenant=route.tenant, why=reason or "unknown"
        )
        await self._do("XADD", self.client.xadd(self.queues.dlq(route.priority), _typed(fields)))

    async def send_raw_dead_letter(
        self, body: str, reason: str, *, attributes: Mapping[str, Mapping[str, Any]] | None = None
    ) -> None:
        from app.transport import sqs_shapes as shapes

        attrs = shapes.foreign_attributes(attributes or {}, reason)
        fields = fields_for(body or "(empty)", attrs, why=reason)
        await self._do("XADD", self.client.xadd(self.settings.dlq, _typed(fields)))

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
        from app.transport import sqs_shapes as shapes

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
        from app.transport.sqs_shapes import summed

        if url is not None:
            return await self._depth(url)
        return summed([await self._depth(s) for s in self.queues.sources()])

    async def dead_letter_depth(self) -> dict[str, int]:
        from app.transport.sqs_shapes import summed

        return summed([await self._depth(s) for s in self.queues.dlqs()])

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


def _typed(fields: Mapping[str, str]) -> Any:
    """Fields as redis-py's xadd is typed to take them."""
    return dict(fields)


def _pairs(flat_fields: Sequence[str]) -> dict[str, str]:
    return {str(flat_fields[i]): str(flat_fields[i + 1]) for i in range(0, len(flat_fields), 2)}
