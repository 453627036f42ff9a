"""The Redis carrier's connection: the pool, the scripts, the consumer groups, what each
stream's lease and backstop are, and the two reads a receive is made of (TAKE, then
XREADGROUP). RedisTransport (redis_streams) builds on it."""

from __future__ import annotations

import os
import socket
import time
import uuid
from typing import Any

import redis.asyncio as aioredis
import redis.exceptions
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff

from app import errors, metrics
from app.settings.config import Settings
from app.transport import redis_scripts
from app.transport.base import Message
from app.transport.queues import QueueSet
from app.transport.redis_entries import GROUP, message, pairs

# A blocked XREADGROUP wakes at least this often to move due delayed messages and take
# over expired leases (a delayed message is due at most this late).
BLOCK_SLICE_MS = 1000
# While receives find messages, a process runs the TAKE script on a stream at most this
# often (an expired lease is taken over, a due delayed message moved, this much later).
TAKE_INTERVAL_SECONDS = 0.25
# Connections per process, and how long a command may wait for an answer (or for a
# free connection).
MAX_CONNECTIONS = 64
SOCKET_TIMEOUT_SECONDS = 10
# Due delayed messages moved onto the stream per receive, at most.
PROMOTE_LIMIT = 100
# The dead-letter streams' visibility timeout: the redrive walk's and the sweeper's.
DLQ_VISIBILITY_SECONDS = 30


class RedisConnection:
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
        # stream -> (when this process last ran TAKE on it, when its next delayed message is
        # due, if any), on the monotonic clock.
        self._taken: dict[str, tuple[float, float | None]] = {}

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

    def _dlq_of(self, stream: str) -> str:
        for p in self.queues.priorities():
            if self.queues.source(p) == stream:
                return self.queues.dlq(p)
        return self.settings.dlq

    def _max_receives(self, stream: str) -> int:
        """The redrive policy's backstop on a source stream; none on a dead-letter one."""
        return 0 if stream in self.queues.dlqs() else self.settings.max_receive_count

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
        now = time.monotonic()
        self._taken[stream] = (now, now + next_due / 1000 if next_due >= 0 else None)
        out = [
            message(stream, str(entry_id), int(receives), pairs(fields))
            for entry_id, receives, fields in answer[1:]
        ]
        return out, next_due

    def _due_in(self, stream: str) -> int:
        """Ms until the next delayed message the last TAKE saw is due (-1: none)."""
        next_due = self._taken.get(stream, (0.0, None))[1]
        return -1 if next_due is None else max(0, int((next_due - time.monotonic()) * 1000))

    def _take_due(self, stream: str) -> bool:
        """Whether this process's last TAKE on the stream is older than the interval, or
        the delayed message it saw next is due."""
        last, next_due = self._taken.get(stream, (0.0, None))
        now = time.monotonic()
        return now - last >= TAKE_INTERVAL_SECONDS or (next_due is not None and now >= next_due)

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
                out.append(message(stream, entry_id, receives, fields))
        return out
