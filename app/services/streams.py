"""Following a job's stream, or a tenant's: the rows after a position, then the ones
written after that, as they commit.

Every API process keeps one ``Hub``: a connection that LISTENs on the channel the
writes notify (migration 0010) and wakes the readers of the job it names. A wake-up only
says "read again": the rows come from the tables, so a reader that missed a notification
(a dropped connection, a restart) catches up at its next read, and any process serves
any job. A reader also reads again every few seconds without one, and, right after one,
a few times at short intervals (a row is readable once every transaction older than it
has ended). Without a hub (a Lambda answering a long poll) the reader only polls.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import TypeVar

from app import errors, store
from app.states import FINAL_FOR_NOW
from app.store.streams import START, Position, StreamEvent

log = logging.getLogger(__name__)

T = TypeVar("T")

# Rows read per round trip.
BATCH = 200
# Read again after a notification found nothing readable yet, after these pauses.
QUICK = (0.05, 0.1, 0.2, 0.4, 0.8)
# Read again this often with no notification (the hub's connection may be down).
IDLE_POLL_SECONDS = 5.0
POLL_WITHOUT_HUB_SECONDS = 1.0
# The longest long poll: API Gateway ends an integration at 29 s.
MAX_WAIT_SECONDS = 25.0
# A hub with readers keeps its row in stream_hubs current this long (writes notify only
# while some hub's is: migration 0031), moved on by a read once less than REFRESH is left.
FOLLOW_SECONDS = 60.0
FOLLOW_REFRESH_SECONDS = 20.0


def parse_position(text: str | None, name: str) -> Position | None:
    """A stream position as the API hands it out ("<tx>-<id>", or "0" for the start)."""
    if text is None or text == "":
        return None
    if text == "0":
        return START
    tx, sep, row = text.partition("-")
    digits = sep and tx.isascii() and tx.isdigit() and row.isascii() and row.isdigit()
    # A transaction id is 64 bits, a row id a bigint.
    if digits and int(tx) < 2**64 and int(row) < 2**63:
        return Position(int(tx), int(row))
    raise errors.BadRequest(
        f'{name} must be a stream event id ("<n>-<n>", or 0), not {text[:50]!r}'
    )


class _Waiter:
    def __init__(self, hub: Hub | None, job_id: uuid.UUID | None) -> None:
        self.hub, self.job_id, self.event = hub, job_id, asyncio.Event()

    def __enter__(self) -> _Waiter:
        if self.hub is not None:
            self.hub.waiters.setdefault(self.job_id, set()).add(self)
        return self

    def __exit__(self, *exc: object) -> None:
        if self.hub is not None:
            found = self.hub.waiters.get(self.job_id)
            if found is not None:
                found.discard(self)
                if not found:
                    del self.hub.waiters[self.job_id]

    async def wait(self, seconds: float) -> bool:
        """True when woken by a notification, False when ``seconds`` passed."""
        try:
            async with asyncio.timeout(seconds):
                await self.event.wait()
        except TimeoutError:
            return False
        return True


class Hub:
    """One process's LISTEN connection and the readers it wakes.

    Writes notify only while some hub says it has readers (its row in stream_hubs,
    through ``db``): a read keeps this hub's row current (``follow``). Without ``db``
    the hub only hears what other hubs' rows let through."""

    def __init__(self, url: str, db: store.Database | None = None) -> None:
        self._url = url
        self._db = db
        self.id = uuid.uuid4()
        self.waiters: dict[uuid.UUID | None, set[_Waiter]] = {}
        self._task: asyncio.Task[None] | None = None
        self.connected = asyncio.Event()
        self._current_until = 0.0  # time.monotonic() when this hub's row stops being current
        self._following = asyncio.Lock()

    async def follow(self) -> bool:
        """See that writes wake this hub for a while yet. True when they had not been
        (its row had lapsed or was never written): what committed meanwhile was not
        announced, so the caller reads again soon."""
        if self._db is None or time.monotonic() < self._current_until - FOLLOW_REFRESH_SECONDS:
            return False
        async with self._following:
            started = time.monotonic()
            if started < self._current_until - FOLLOW_REFRESH_SECONDS:
                return False
            lapsed = started >= self._current_until
            await store.streams.follow(self._db, self.id, FOLLOW_SECONDS)
            self._current_until = started + FOLLOW_SECONDS
            return lapsed

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self._run(), name="tasklease-stream-hub")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        if self._db is not None and self._current_until > 0:
            self._current_until = 0.0
            with contextlib.suppress(errors.StoreError):
                await store.streams.leave(self._db, self.id)

    async def _run(self) -> None:
        delay = 0.5
        while True:
            try:
                async for payload in store.streams.listen(self._url, self.connected):
                    delay = 0.5
                    self._wake(payload)
            except errors.StoreError as exc:
                log.warning("stream listener lost its connection: %s", exc)
            self.connected.clear()
            self._wake(None)  # readers catch up from the tables
            await asyncio.sleep(delay)
            delay = min(delay * 2, 10.0)

    def _wake(self, payload: str | None) -> None:
        try:
            job = uuid.UUID(payload) if payload else None
        except ValueError:
            job = None
        groups = (
            list(self.waiters.values())
            if job is None
            else [self.waiters.get(job, set()), self.waiters.get(None, set())]
        )
        for group in groups:
            for waiter in group:
                waiter.event.set()


@dataclass(frozen=True, slots=True)
class Page:
    """A long poll's answer: the events, where to go on from, and whether the job's
    stream has ended (a job stream whose job is finished and fully read)."""

    events: list[StreamEvent]
    next: Position
    done: bool


# A read: the events after a position, and the position to read after next.
Read = Callable[[Position], Awaitable[tuple[list[StreamEvent], Position]]]


def _pause(hub: Hub | None, quick: int) -> float:
    """How long to wait for a wake-up before reading again, ``quick`` reads after one."""
    if quick < len(QUICK):
        return QUICK[quick]
    if hub is None or not hub.connected.is_set():
        # No listener (a Lambda, or its connection is down): poll.
        return POLL_WITHOUT_HUB_SECONDS
    return IDLE_POLL_SECONDS


async def _batch(
    hub: Hub | None,
    job_id: uuid.UUID | None,
    read: Read,
    after: Position,
    deadline: float,
    ended: Callable[[Position], Awaitable[bool]] | None = None,
) -> tuple[list[StreamEvent], bool, Position]:
    """The next rows after ``after``, waiting until ``deadline`` (monotonic) for some,
    and where to read after them; ([], True, …) when ``ended`` says the stream is over."""
    quick = len(QUICK)
    while True:
        if hub is not None and await hub.follow():
            quick = 0
        with _Waiter(hub, job_id) as waiter:
            events, after = await read(after)
            if events:
                return events, False, after
            if ended is not None and await ended(after):
                return [], True, after
            left = deadline - time.monotonic()
            if left <= 0:
                return [], False, after
            woken = await waiter.wait(min(_pause(hub, quick), left))
            quick = 0 if woken else quick + 1


async def wait_for(
    hub: Hub | None, job_id: uuid.UUID, look: Callable[[], Awaitable[tuple[T, bool]]], wait: float
) -> tuple[T, bool]:
    """Look until ``look`` answers (True, …) — woken by the job's notifications, polling
    as a stream reader does — or until ``wait`` seconds passed (at most MAX_WAIT_SECONDS);
    answers what it last found."""
    deadline = time.monotonic() + max(0.0, min(wait, MAX_WAIT_SECONDS))
    quick = len(QUICK)
    while True:
        if hub is not None and await hub.follow():
            quick = 0
        with _Waiter(hub, job_id) as waiter:
            found, done = await look()
            left = deadline - time.monotonic()
            if done or left <= 0:
                return found, done
            woken = await waiter.wait(min(_pause(hub, quick), left))
            quick = 0 if woken else quick + 1


def _job_ended(db: store.Database, job_id: uuid.UUID) -> Callable[[Position], Awaitable[bool]]:
    async def ended(after: Position) -> bool:
        tail = await store.streams.tail(db, job_id)
        if tail is None:
            return True  # gone (pruned)
        if tail.state not in FINAL_FOR_NOW or not tail.readable:
            return False
        return tail.last is None or tail.last <= after

    return ended


def _reader(db: store.Database, job_id: uuid.UUID | None, tenant: str | None) -> Read:
    async def read(after: Position) -> tuple[list[StreamEvent], Position]:
        if job_id is not None:
            events = await store.streams.read_job(db, job_id, after, limit=BATCH)
            return events, events[-1].position if events else after
        return await store.streams.read_all(db, tenant, after, limit=BATCH)

    return read


async def start_of_all(db: store.Database) -> Position:
    """Where a tenant stream without a position starts: now."""
    return await store.streams.horizon(db)


async def follow_job(
    db: store.Database, hub: Hub | None, job_id: uuid.UUID, after: Position
) -> AsyncIterator[StreamEvent | None]:
    """The job's events after ``after`` as they commit; None once it is finished and
    read to its end (the caller ends the stream there). A redrive starts it again, so
    a caller that wants more asks again."""
    read, ended = _reader(db, job_id, None), _job_ended(db, job_id)
    while True:
        events, done, after = await _batch(hub, job_id, read, after, time.monotonic() + 3600, ended)
        if done:
            yield None
            return
        for event in events:
            yield event


async def follow_all(
    db: store.Database, hub: Hub | None, tenant: str | None, after: Position
) -> AsyncIterator[StreamEvent]:
    """Every event of ``tenant``'s jobs (all tenants' for None) after ``after``; never ends."""
    read = _reader(db, None, tenant)
    while True:
        events, _, after = await _batch(hub, None, read, after, time.monotonic() + 3600)
        for event in events:
            yield event


async def poll(
    db: store.Database,
    hub: Hub | None,
    *,
    job_id: uuid.UUID | None,
    tenant: str | None,
    after: Position,
    wait: float,
) -> Page:
    """A long poll: the events after ``after``, waiting up to ``wait`` seconds for one;
    ``next`` may pass rows of other tenants that were read and not sent."""
    wait = max(0.0, min(wait, MAX_WAIT_SECONDS))
    ended = _job_ended(db, job_id) if job_id is not None else None
    events, done, after = await _batch(
        hub, job_id, _reader(db, job_id, tenant), after, time.monotonic() + wait, ended
    )
    return Page(events, after, done)


async def overview(db: store.Database, tenant: str | None) -> store.streams.Overview:
    return await store.streams.overview(db, tenant)
