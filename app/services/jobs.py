"""Reading jobs (one, a page, a job's events and effects) and cancelling one, for the
API and the CLI. Every read is scoped: a caller's tenant, or None for an operator."""

from __future__ import annotations

import base64
import binascii
import datetime as dt
import hashlib
import hmac
import json
import uuid
from typing import Any

from app import errors, store
from app.services import filters, server_secret
from app.settings import bounds
from app.states import JobState
from app.store.records import Job

# cancel(): rounds of "cancel if waiting, else ask the lease holder" while a lease ends
# between the two statements.
CANCEL_TRIES = 3


async def find(db: store.Database, job_id: uuid.UUID, *, scope: str | None) -> Job:
    """The job, if the caller may see it. Another tenant's job is NotFound, never
    Forbidden: no answer tells a caller that a job id exists elsewhere."""
    job = await store.jobs.get_for_tenant(db, job_id, scope)
    if job is None:
        raise errors.NotFound(f"no job {job_id}")
    return job


async def get_job(db: store.Database, job_id: uuid.UUID, *, scope: str | None) -> dict[str, Any]:
    """The job as a dict of its columns (see ``find``)."""
    return (await find(db, job_id, scope=scope)).to_dict()


# A cursor is "<position>.<signature>": the position (the last job's created_at and id)
# and an HMAC-SHA-256 (truncated to 128 bits) over it and the listing it came from (the
# caller's scope, state and kind), under a key derived from the server secret. A cursor
# the API did not hand out, or one handed out for another listing, is refused (422, as
# every bad request: tests/integration/test_api_bad_requests.py).
CURSOR_MAC_BYTES = 16


def _b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def _cursor_mac(key: bytes, position: str, listing: dict[str, str | None]) -> bytes:
    signed = json.dumps([position, listing], sort_keys=True, separators=(",", ":"))
    return hmac.new(key, signed.encode(), hashlib.sha256).digest()[:CURSOR_MAC_BYTES]


def encode_cursor(job: Job, *, key: bytes, listing: dict[str, str | None]) -> str:
    position = _b64(f"{job.created_at.isoformat()}|{job.id}".encode())
    return f"{position}.{_b64(_cursor_mac(key, position, listing))}"


def decode_cursor(
    cursor: str, *, key: bytes, listing: dict[str, str | None]
) -> tuple[dt.datetime, uuid.UUID]:
    bad = errors.BadRequest("cursor is not one this API returned for this listing")
    position, _, mac = cursor.partition(".")
    try:
        signature = _unb64(mac)
        # Only the exact text handed out: base64 with other unused bits decodes the same.
        genuine = _b64(signature) == mac and hmac.compare_digest(
            signature, _cursor_mac(key, position, listing)
        )
    except (ValueError, binascii.Error) as exc:
        raise bad from exc
    if not genuine:
        raise bad
    try:
        created, job_id = _unb64(position).decode().split("|", 1)
        return dt.datetime.fromisoformat(created), uuid.UUID(job_id)
    except (ValueError, UnicodeDecodeError) as exc:  # pragma: no cover - we signed it
        raise bad from exc


async def list_jobs(
    db: store.Database,
    *,
    state: JobState | None = None,
    kind: str | None = None,
    limit: int = 50,
    cursor: str | None = None,
    scope: str | None,
) -> tuple[list[dict[str, Any]], str | None]:
    """A page of jobs, newest first, and the cursor of the next page (None: the last)."""
    if not 1 <= limit <= bounds.MAX_PAGE:
        raise errors.BadRequest(f"limit must be between 1 and {bounds.MAX_PAGE}")
    key = (await server_secret.of(db).load(db)).key(server_secret.CURSOR)
    listing = {"scope": scope, "state": str(state) if state else None, "kind": kind}
    after = decode_cursor(cursor, key=key, listing=listing) if cursor else None
    found = await store.jobs.page(
        db, tenant=scope, state=state, kind=kind, after=after, limit=limit + 1
    )
    more = len(found) > limit
    found = found[:limit]
    following = encode_cursor(found[-1], key=key, listing=listing) if more and found else None
    return [job.to_dict() for job in found], following


def plain_listing(flt: filters.JobFilter) -> bool:
    """Whether the filter is the listing's own (a kind, one state): its indexed branches."""
    rest = flt.model_dump(exclude_none=True, exclude={"kind", "states"})
    return not rest and len(flt.states or []) <= 1


async def search(
    db: store.Database,
    flt: filters.JobFilter,
    *,
    limit: int = 50,
    cursor: str | None = None,
    scope: str | None,
) -> tuple[list[dict[str, Any]], str | None]:
    """A page of the jobs ``flt`` matches, newest first, and the next page's cursor
    (signed for this filter: another filter's cursor is refused)."""
    if plain_listing(flt):
        state = flt.states[0] if flt.states else None
        return await list_jobs(
            db, state=state, kind=flt.kind, limit=limit, cursor=cursor, scope=scope
        )
    if not 1 <= limit <= bounds.MAX_PAGE:
        raise errors.BadRequest(f"limit must be between 1 and {bounds.MAX_PAGE}")
    key = (await server_secret.of(db).load(db)).key(server_secret.CURSOR)
    listing = {"scope": scope, "filter": json.dumps(flt.canonical(), sort_keys=True)}
    after = decode_cursor(cursor, key=key, listing=listing) if cursor else None
    found = await store.search.page(db, flt.params(scope=scope), after=after, limit=limit + 1)
    more = len(found) > limit
    found = found[:limit]
    following = encode_cursor(found[-1], key=key, listing=listing) if more and found else None
    return [job.to_dict() for job in found], following


async def events(
    db: store.Database, job_id: uuid.UUID, *, scope: str | None
) -> list[dict[str, Any]]:
    await find(db, job_id, scope=scope)
    return [event.to_dict() for event in await store.jobs.events(db, job_id)]


async def effects(
    db: store.Database, job_id: uuid.UUID, *, scope: str | None
) -> list[dict[str, Any]]:
    await find(db, job_id, scope=scope)
    return [effect.to_dict() for effect in await store.effects.of_job(db, job_id)]


def waiting_for(job: dict[str, Any]) -> dict[str, Any] | None:
    """What a waiting job waits for, as the API and the CLI show it (None unless it waits):
    a timer until ``until`` (a delayed submission's key is 'run_at'), a callback (until its
    deadline) or children (their rule: how many are needed, or all, how many failures are
    tolerated, of how many)."""
    if job["state"] != JobState.WAITING or job["wait_kind"] is None:
        return None
    rule = None
    if job["wait_kind"] == "children" and isinstance(job["wait_rule"], dict):
        r = job["wait_rule"]
        rule = {
            "need": r.get("need"),
            "all": bool(r.get("all")),
            "tolerate": r.get("tolerate"),
            "count": len(r.get("children") or []),
        }
    return {
        "kind": job["wait_kind"],
        "key": job["wait_key"],
        "until": job["wake_at"],
        "rule": rule,
    }


def lease_holder(job: dict[str, Any]) -> str | None:
    """The worker holding the job's lease, as the API and the CLI show it: None unless a
    live lease holds it (leased or running, not expired). The row keeps the last holder's
    name after the lease ends (its events name it), which is no lease."""
    if job["state"] not in (JobState.LEASED, JobState.RUNNING):
        return None
    expires = job["lease_expires_at"]
    if expires is None or expires <= dt.datetime.now(dt.UTC):
        return None
    owner: str | None = job["lease_owner"]
    return owner


# How many of a job's children `GET /v1/jobs/{id}` and `jobs show` list (the count is whole).
MAX_CHILDREN_SHOWN = 100


async def children(
    db: store.Database, job_id: uuid.UUID, *, scope: str | None, limit: int = MAX_CHILDREN_SHOWN
) -> tuple[list[dict[str, Any]], int]:
    """A job's first ``limit`` children (oldest first), and how many it has in all."""
    await find(db, job_id, scope=scope)
    shown = await store.waits.children_of(db, job_id, limit=limit)
    total = len(shown) if len(shown) < limit else await store.waits.count_children(db, job_id)
    return [child.to_dict() for child in shown], total


async def callbacks(
    db: store.Database, job_id: uuid.UUID, *, scope: str | None
) -> list[dict[str, Any]]:
    """A job's callbacks: key, state, deadline, heartbeats, what each asks (details), the
    answer; never a token."""
    await find(db, job_id, scope=scope)
    return [
        {
            "key": c.key,
            "state": c.state,
            "timeout_seconds": c.timeout_seconds,
            "deadline": c.deadline,
            "heartbeats": c.heartbeats,
            "created_at": c.created_at,
            "answered_at": c.answered_at,
            "details": c.details,
            "result": c.result,
            "error": c.error,
        }
        for c in await store.waits.callbacks_of(db, job_id)
    ]


async def cancel(db: store.Database, job_id: uuid.UUID, *, scope: str | None) -> dict[str, Any]:
    """Cancel a job: at once when no live lease holds it; otherwise ask its worker (the
    flag's trigger notifies it: app/worker/cancels.py; its heartbeat sees the flag too),
    which stops the job and marks it cancelled. A finished job is a Conflict."""
    job = await find(db, job_id, scope=scope)
    if job.state.terminal:
        raise errors.Conflict(
            f"job {job_id} is already {job.state}: only unfinished jobs can be cancelled"
        )
    for _ in range(CANCEL_TRIES):
        if await store.jobs.cancel_waiting(
            db, job_id, detail="cancelled by the caller"
        ) or await store.jobs.request_cancel(db, job_id):
            break
        # Neither held: the lease ended between the two statements (the job waits again,
        # or finished). Look again rather than answer 200 for a cancel that did nothing.
    job = await find(db, job_id, scope=scope)
    if job.state == JobState.SUCCEEDED:
        raise errors.Conflict(f"job {job_id} succeeded before it could be cancelled")
    return job.to_dict()


async def key_status(db: store.Database, job: dict[str, Any]) -> dict[str, Any] | None:
    """Where a keyed job stands on its key, as `jobs show` shows it (None: no key): its
    key's limits (written on the job at its submission), the key's other jobs holding it
    and queued before it, and whether it waits for its key: queued with its key's
    concurrency of jobs ahead of it (the claim parks it until one of them ends), or with
    the key's rate used up in the period (the claim hands it back until a claim leaves)."""
    if job.get("flow_key") is None:
        return None
    at = await store.key_view.position(db, job["id"])
    if at is None:  # pragma: no cover - the job was just read; a prune in between
        return None
    queued = job["state"] == JobState.QUEUED
    concurrency, limit = job.get("key_concurrency"), job.get("key_rate")
    return {
        "key": job["flow_key"],
        "concurrency": concurrency,
        "rate": None
        if limit is None
        else {"limit": limit, "per_seconds": job.get("key_rate_seconds")},
        "holding": at.holding,
        "queued_ahead": at.queued_ahead,
        "open": at.open,
        "waits_for_key": queued
        and concurrency is not None
        and at.holding + at.queued_ahead >= concurrency,
        "waits_for_rate": queued
        and limit is not None
        and at.recent_claims is not None
        and at.recent_claims >= limit,
    }
