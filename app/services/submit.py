"""What the API and the CLI share: submit a job, read jobs, their events and effects."""

from __future__ import annotations

import asyncio
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

from app import aws_limits as limits
from app import batching, crashpoints, errors, kinds
from app.config import Settings
from app.services import auth
from app.states import JobState
from app.store.pool import Database, q
from app.transport import sqs as queue

log = logging.getLogger(__name__)

DEFAULT_TENANT = "default"
MAX_IDEMPOTENCY_KEY = 200
# Jobs one POST /v1/jobs/batch may carry (at most the default burst, so a batch fits it).
MAX_SUBMIT_BATCH = 100
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


@dataclass(frozen=True)
class NewJob:
    """One job as a caller asks for it."""

    kind: str
    payload: Any
    max_attempts: int | None = None
    timeout_seconds: int | None = None
    idempotency_key: str | None = None


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
    key_id: str | None = None,
) -> Submitted:
    """Validate, write the job and its outbox row in one statement, commit, then send."""
    new = NewJob(kind, payload, max_attempts, timeout_seconds, idempotency_key)
    (submitted,) = await submit_many(
        settings, db, sqs, [new], tenant=tenant, sender=sender, key_id=key_id
    )
    return submitted


@dataclass(frozen=True)
class _Row:
    """A validated job, as the statement takes it."""

    id: uuid.UUID
    kind: str
    payload: dict[str, Any]
    max_attempts: int
    timeout_seconds: int
    idempotency_key: str | None
    request_hash: str


def _validated(settings: Settings, new: NewJob) -> _Row:
    k = kinds.get(new.kind)
    problem = unstorable(new.payload)
    if problem:
        raise errors.BadRequest(f"payload: {problem}")
    parsed = k.parse(new.payload)
    attempts = new.max_attempts or k.max_attempts or settings.max_attempts
    timeout = new.timeout_seconds or k.timeout_seconds or settings.default_job_timeout_seconds
    if not 1 <= attempts < settings.max_receive_count:
        raise errors.BadRequest(
            f"max_attempts must be between 1 and {settings.max_receive_count - 1} "
            "(below the queue's maxReceiveCount)"
        )
    if not 1 <= timeout <= limits.MAX_VISIBILITY_SECONDS:
        raise errors.BadRequest(
            f"timeout_seconds must be between 1 and {limits.MAX_VISIBILITY_SECONDS}"
        )
    key = new.idempotency_key
    if key is not None and not 1 <= len(key) <= MAX_IDEMPOTENCY_KEY:
        raise errors.BadRequest(f"Idempotency-Key must be 1 to {MAX_IDEMPOTENCY_KEY} characters")
    stored_payload = parsed.model_dump(mode="json", exclude_unset=True)
    digest = request_hash(new.kind, stored_payload, attempts, timeout)
    return _Row(uuid.uuid4(), new.kind, stored_payload, attempts, timeout, key, digest)


async def submit_many(
    settings: Settings,
    db: Database,
    sqs: queue.Queue,
    jobs: list[NewJob],
    *,
    tenant: str = DEFAULT_TENANT,
    sender: OutboxSender | None = None,
    key_id: str | None = None,
) -> list[Submitted]:
    """Validate every job, then admit and write them all (or none) with their outbox rows
    in one statement, commit, then send. One answer per job, in order. A bad job, an
    Idempotency-Key reused with another request, or a limit refuses the whole call.
    ``key_id``: the caller's API key, whose revocation the statement checks (a revoked
    key is Unauthorized, before anything else is answered and with nothing written)."""
    if not 1 <= len(jobs) <= MAX_SUBMIT_BATCH:
        raise errors.BadRequest(f"a batch holds 1 to {MAX_SUBMIT_BATCH} jobs, not {len(jobs)}")
    batch = len(jobs) > 1
    rows: list[_Row] = []
    for i, new in enumerate(jobs):
        try:
            rows.append(_validated(settings, new))
        except errors.BadRequest as exc:
            raise errors.BadRequest(f"jobs[{i}]: {exc}" if batch else str(exc)) from exc
        first = next(
            (j for j, r in enumerate(rows[:-1]) if r.idempotency_key == new.idempotency_key),
            None,
        )
        if new.idempotency_key is not None and first is not None:
            raise errors.BadRequest(
                f"jobs[{i}]: idempotency_key {new.idempotency_key!r} is also jobs[{first}]'s: "
                "each job of a batch needs its own"
            )
    written = await db.fetch(
        q("insert_jobs"),
        {
            "tenant": tenant,
            "ids": [r.id for r in rows],
            "kinds": [r.kind for r in rows],
            "payloads": [Jsonb(r.payload) for r in rows],
            "max_attempts": [r.max_attempts for r in rows],
            "timeouts": [r.timeout_seconds for r in rows],
            "idempotency_keys": [r.idempotency_key for r in rows],
            "request_hashes": [r.request_hash for r in rows],
            "rate": settings.rate_limit_per_second,
            "burst": settings.rate_limit_burst,
            "max_in_flight": settings.max_jobs_in_flight,
            "key_id": key_id,
        },
    )
    verdict = written[0]  # the statement always returns its verdict, on every row
    if not verdict["key_ok"]:
        raise auth.invalid_key()  # revoked since this process verified it: no replay either
    made = {row["id"]: _job(row) for row in written if row["id"] is not None}
    if verdict["conflict_ord"] is not None:
        _conflict(int(verdict["conflict_ord"]) - 1, batch)
    pending = [r for r in rows if r.id not in made]
    earlier: dict[str, dict[str, Any]] = {}
    if pending and any(r.idempotency_key is not None for r in pending):
        keys = [r.idempotency_key for r in pending if r.idempotency_key is not None]
        found = await db.fetch(
            q("jobs_by_idempotency_keys"), {"tenant": tenant, "idempotency_keys": keys}
        )
        earlier = {row["idempotency_key"]: row for row in found}
    out: list[Submitted] = []
    for i, r in enumerate(rows):
        if r.id in made:
            out.append(Submitted(job=made[r.id], created=True))
            continue
        existing = earlier.get(r.idempotency_key) if r.idempotency_key is not None else None
        if existing is None:
            # Refused by admission (a replay found nothing to refuse).
            _refuse(verdict, batch)
            raise errors.StoreError("the job was neither written nor refused")  # pragma: no cover
        if existing["request_hash"] != r.request_hash:
            # A concurrent request took the key between the statement's look and its write.
            _conflict(i, batch)
        out.append(Submitted(job=existing, created=False))
    if made:
        await _send_after_commit(db, sqs, list(made.values()), sender)
    return out


def _job(row: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in row.items() if k not in _VERDICT}


def _conflict(index: int, batch: bool) -> None:
    where = f"jobs[{index}]: " if batch else ""
    raise errors.Conflict(
        f"{where}Idempotency-Key was already used with a different request body; "
        "use a new key for a new job"
    )


async def _send_after_commit(
    db: Database, sqs: queue.Queue, jobs: list[dict[str, Any]], sender: OutboxSender | None
) -> None:
    """The fast path: the jobs are committed; send their messages now. A failed send is
    the outbox relay's to retry: the caller still gets its 202."""
    for job in jobs:
        crashpoints.hit(crashpoints.Point.AFTER_OUTBOX_COMMIT, job_id=job["id"])
    try:
        if sender is not None:
            await asyncio.gather(*(sender.send(j["outbox_id"], j["id"]) for j in jobs))
        else:
            await send_outbox(db, sqs, [(j["outbox_id"], j["id"]) for j in jobs])
    except errors.TaskleaseError as exc:
        log.warning(
            "fast-path send failed; the outbox relay will send it: %s",
            exc,
            extra={"job_id": jobs[0]["id"], "count": len(jobs)},
        )


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


_VERDICT = (
    "rate_ok",
    "wait_seconds",
    "rate",
    "burst",
    "wanted",
    "flight_ok",
    "max_in_flight",
    "conflict_ord",
)


def _refuse(verdict: dict[str, Any], batch: bool = False) -> None:
    """429 for a refused admission, with when to come back; a batch that could never fit
    the tenant's burst is a 422 instead (waiting would not help)."""
    wanted = int(verdict["wanted"])
    if not verdict["rate_ok"]:
        if wanted > verdict["burst"]:
            raise errors.BadRequest(
                f"this batch has {wanted} new jobs, more than this tenant's burst of "
                f"{verdict['burst']}: send at most {verdict['burst']} per request"
            )
        wait = math.ceil(float(verdict["wait_seconds"] or 1))
        raise errors.TooManyRequests(
            f"rate limit: this tenant may submit {verdict['rate']:g} jobs per second"
            + (f" (this batch asks for {wanted})" if batch else ""),
            retry_after=wait,
        )
    if not verdict["flight_ok"]:
        raise errors.TooManyRequests(
            f"this tenant has too many unfinished jobs for {wanted} more: its limit is "
            f"{verdict['max_in_flight']}; submit more as they finish"
            if batch
            else f"this tenant already has {verdict['max_in_flight']} unfinished jobs, its "
            "limit; submit more as they finish",
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
