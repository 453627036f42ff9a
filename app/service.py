"""What the API and the CLI share: submit a job, read jobs, their events and effects."""

from __future__ import annotations

import base64
import datetime as dt
import hashlib
import json
import logging
import math
import uuid
from dataclasses import dataclass
from typing import Any

from psycopg.types.json import Jsonb

from app import batching, crashpoints, errors, kinds, limits, queue
from app.config import Settings
from app.db import Database, q
from app.states import JobState

log = logging.getLogger(__name__)

DEFAULT_TENANT = "default"
MAX_IDEMPOTENCY_KEY = 200
MAX_PAGE = 200
# Retry-After for a tenant at its cap of unfinished jobs: jobs finish on their own time.
IN_FLIGHT_RETRY_AFTER_SECONDS = 5
# Nesting a payload may have: pydantic serializes at most 255 levels, and no real payload
# comes near this.
MAX_PAYLOAD_DEPTH = 100
# cancel(): rounds of "cancel if waiting, else ask the lease holder" while a lease ends
# between the two statements.
CANCEL_TRIES = 3


@dataclass(frozen=True)
class Submitted:
    job: dict[str, Any]
    created: bool  # False: an earlier request with the same Idempotency-Key made it


def request_hash(kind: str, payload: Any, max_attempts: int, timeout_seconds: int) -> str:
    canonical = json.dumps(
        {
            "kind": kind,
            "payload": payload,
            "max_attempts": max_attempts,
            "timeout": timeout_seconds,
        },
        sort_keys=True,
        separators=(",", ":"),
    )
    return hashlib.sha256(canonical.encode()).hexdigest()


async def submit(
    settings: Settings,
    db: Database,
    sqs: queue.Queue,
    *,
    kind: str,
    payload: Any,
    max_attempts: int | None = None,
    timeout_seconds: int | None = None,
    idempotency_key: str | None = None,
    tenant: str = DEFAULT_TENANT,
    sender: OutboxSender | None = None,
) -> Submitted:
    """Validate, write the job and its outbox row in one statement, commit, then send."""
    k = kinds.get(kind)
    problem = unstorable(payload)
    if problem:
        raise errors.BadRequest(f"payload: {problem}")
    parsed = k.parse(payload)
    attempts = max_attempts or k.max_attempts or settings.max_attempts
    timeout = timeout_seconds or k.timeout_seconds or settings.default_job_timeout_seconds
    if not 1 <= attempts < settings.max_receive_count:
        raise errors.BadRequest(
            f"max_attempts must be between 1 and {settings.max_receive_count - 1} "
            "(below the queue's maxReceiveCount)"
        )
    if not 1 <= timeout <= limits.MAX_VISIBILITY_SECONDS:
        raise errors.BadRequest(
            f"timeout_seconds must be between 1 and {limits.MAX_VISIBILITY_SECONDS}"
        )
    if idempotency_key is not None and not 1 <= len(idempotency_key) <= MAX_IDEMPOTENCY_KEY:
        raise errors.BadRequest(f"Idempotency-Key must be 1 to {MAX_IDEMPOTENCY_KEY} characters")
    stored_payload = parsed.model_dump(mode="json", exclude_unset=True)
    digest = request_hash(kind, stored_payload, attempts, timeout)
    verdict = await db.fetch_one(
        q("insert_job"),
        {
            "id": uuid.uuid4(),
            "tenant": tenant,
            "kind": kind,
            "payload": Jsonb(stored_payload),
            "max_attempts": attempts,
            "timeout_seconds": timeout,
            "idempotency_key": idempotency_key,
            "request_hash": digest,
            "rate": settings.rate_limit_per_second,
            "burst": settings.rate_limit_burst,
            "max_in_flight": settings.max_jobs_in_flight,
        },
    )
    assert verdict is not None  # the statement always returns its verdict row
    if verdict["id"] is None:
        # Not written: a replay of an earlier request (answered even over a limit, since
        # it asks for nothing new), or refused by admission.
        existing = (
            await db.fetch_one(
                q("job_by_idempotency_key"), {"tenant": tenant, "idempotency_key": idempotency_key}
            )
            if idempotency_key is not None
            else None
        )
        if existing is not None:
            if existing["request_hash"] != digest:
                raise errors.Conflict(
                    "Idempotency-Key was already used with a different request body; "
                    "use a new key for a new job"
                )
            return Submitted(job=existing, created=False)
        _refuse(verdict)
        raise errors.StoreError("the job was neither written nor refused")  # pragma: no cover
    job = {k: v for k, v in verdict.items() if k not in _VERDICT}
    crashpoints.hit(crashpoints.Point.AFTER_OUTBOX_COMMIT, job_id=job["id"])
    try:
        if sender is not None:
            await sender.send(job["outbox_id"], job["id"])
        else:
            await send_outbox(db, sqs, [(job["outbox_id"], job["id"])])
    except errors.TaskleaseError as exc:
        # The job is committed: the caller gets its 202 and the outbox relay sends it.
        log.warning(
            "fast-path send failed; the outbox relay will send it: %s",
            exc,
            extra={"job_id": job["id"]},
        )
    return Submitted(job=job, created=True)


def unstorable(value: Any) -> str | None:
    """Why this text or JSON value cannot be stored and served back, or None: PostgreSQL's
    text and jsonb refuse the NUL character, a lone surrogate (what JSON's "\\ud800"
    escape decodes to) has no UTF-8 form, jsonb has no NaN or Infinity (Python's JSON
    parser reads both), and pydantic serializes no more than 255 levels of nesting."""
    todo = [(value, 0)]
    while todo:
        item, depth = todo.pop()
        if isinstance(item, str):
            if "\x00" in item:
                return "text must not contain the NUL character (\\u0000)"
            if not item.isascii():
                try:
                    item.encode()
                except UnicodeEncodeError:
                    return "text must be valid Unicode (a lone surrogate has no UTF-8 form)"
        elif isinstance(item, float) and not math.isfinite(item):
            return "numbers must be finite (JSON has no NaN or Infinity)"
        elif isinstance(item, dict | list):
            if depth >= MAX_PAYLOAD_DEPTH:
                return f"must not nest objects and arrays deeper than {MAX_PAYLOAD_DEPTH} levels"
            inner = [*item.keys(), *item.values()] if isinstance(item, dict) else item
            todo.extend((x, depth + 1) for x in inner)
    return None


_VERDICT = ("rate_ok", "wait_seconds", "rate", "flight_ok", "max_in_flight")


def _refuse(verdict: dict[str, Any]) -> None:
    """429 for a refused admission, with when to come back."""
    if not verdict["rate_ok"]:
        wait = math.ceil(float(verdict["wait_seconds"] or 1))
        raise errors.TooManyRequests(
            f"rate limit: this tenant may submit {verdict['rate']:g} jobs per second",
            retry_after=wait,
        )
    if not verdict["flight_ok"]:
        raise errors.TooManyRequests(
            f"this tenant already has {verdict['max_in_flight']} unfinished jobs, its limit; "
            "submit more as they finish",
            retry_after=IN_FLIGHT_RETRY_AFTER_SECONDS,
        )


class OutboxSender:
    """The API's post-commit sends: concurrent requests' messages gathered into one
    SendMessageBatch and one statement that marks their outbox rows sent. A request
    still waits for its own message to be sent before it answers (a Lambda's process
    may be frozen right after the answer); a lone request is sent at once."""

    def __init__(self, db: Database, sqs: queue.Queue) -> None:
        self.db = db
        self.sqs = sqs
        self.batcher: batching.Batcher[tuple[int, uuid.UUID], bool] = batching.Batcher(
            self._flush, max_size=limits.MAX_BATCH, max_in_flight=2
        )

    async def send(self, outbox_id: int, job_id: uuid.UUID) -> bool:
        """True when the message was sent; False leaves it to the outbox relay."""
        return await self.batcher.submit((outbox_id, job_id))

    async def _flush(self, rows: list[tuple[int, uuid.UUID]]) -> list[bool]:
        sent = await send_outbox(self.db, self.sqs, rows)
        return [outbox_id in sent for outbox_id, _ in rows]


async def send_outbox(
    db: Database, sqs: queue.Queue, rows: list[tuple[int, uuid.UUID]]
) -> set[int]:
    """Send the messages for these outbox rows; mark the sent ones. Returns their ids."""
    if not rows:
        return set()
    failed = set(await sqs.send_jobs([job_id for _, job_id in rows]))
    sent = [oid for oid, job_id in rows if str(job_id) not in failed]
    unsent = [oid for oid, job_id in rows if str(job_id) in failed]
    if sent:
        await db.fetch(q("mark_outbox_sent"), {"ids": sent})
    if unsent:
        log.warning("send failed; the outbox relay will retry", extra={"count": len(unsent)})
        await db.fetch(q("note_outbox_failure"), {"ids": unsent, "error": "send failed"})
    return set(sent)


async def get_job(db: Database, job_id: uuid.UUID, *, scope: str | None) -> dict[str, Any]:
    """The job, if the caller may see it. ``scope``: the caller's tenant, or None for an
    operator (every tenant). Another tenant's job is NotFound, never Forbidden: no
    answer tells a caller that a job id exists elsewhere."""
    row = await db.fetch_one(q("get_job_for_tenant"), {"id": job_id, "tenant": scope})
    if row is None:
        raise errors.NotFound(f"no job {job_id}")
    return row


def encode_cursor(row: dict[str, Any]) -> str:
    raw = f"{row['created_at'].isoformat()}|{row['id']}"
    return base64.urlsafe_b64encode(raw.encode()).decode().rstrip("=")


def decode_cursor(cursor: str) -> tuple[dt.datetime, uuid.UUID]:
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode()
        created, job_id = raw.split("|", 1)
        return dt.datetime.fromisoformat(created), uuid.UUID(job_id)
    except (ValueError, UnicodeDecodeError) as exc:
        raise errors.BadRequest("cursor is not one this API returned") from exc


async def list_jobs(
    db: Database,
    *,
    state: JobState | None = None,
    kind: str | None = None,
    limit: int = 50,
    cursor: str | None = None,
    scope: str | None,
) -> tuple[list[dict[str, Any]], str | None]:
    if not 1 <= limit <= MAX_PAGE:
        raise errors.BadRequest(f"limit must be between 1 and {MAX_PAGE}")
    after_created, after_id = decode_cursor(cursor) if cursor else (None, None)
    rows = await db.fetch(
        q("list_jobs"),
        {
            "tenant": scope,
            "state": state.value if state else None,
            "kind": kind,
            "after_created": after_created,
            "after_id": after_id,
            "limit": limit + 1,
        },
    )
    more = len(rows) > limit
    rows = rows[:limit]
    return rows, (encode_cursor(rows[-1]) if more and rows else None)


async def events(db: Database, job_id: uuid.UUID, *, scope: str | None) -> list[dict[str, Any]]:
    await get_job(db, job_id, scope=scope)
    return await db.fetch(q("job_events"), {"id": job_id})


async def effects(db: Database, job_id: uuid.UUID, *, scope: str | None) -> list[dict[str, Any]]:
    await get_job(db, job_id, scope=scope)
    return await db.fetch(q("job_effects"), {"id": job_id})


async def cancel(db: Database, job_id: uuid.UUID, *, scope: str | None) -> dict[str, Any]:
    """Cancel a job: at once when no live lease holds it; otherwise ask its worker, whose
    heartbeat stops the job and marks it cancelled. A finished job is a Conflict."""
    job = await get_job(db, job_id, scope=scope)
    state = JobState(job["state"])
    if state in (JobState.SUCCEEDED, JobState.CANCELLED):
        raise errors.Conflict(
            f"job {job_id} is already {state}: only unfinished jobs can be cancelled"
        )
    for _ in range(CANCEL_TRIES):
        changed = await db.fetch_one(
            q("cancel_waiting"), {"id": job_id, "detail": "cancelled by the caller"}
        )
        if (changed and changed["changed"]) or await db.fetch(q("request_cancel"), {"id": job_id}):
            break
        # Neither held: the lease ended between the two statements (the job waits again,
        # or finished). Look again rather than answer 200 for a cancel that did nothing.
    job = await get_job(db, job_id, scope=scope)
    if JobState(job["state"]) == JobState.SUCCEEDED:
        raise errors.Conflict(f"job {job_id} succeeded before it could be cancelled")
    return job
