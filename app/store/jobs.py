"""The jobs aggregate: admission and insert, reads, listing, and cancelling."""

from __future__ import annotations

import datetime as dt
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from psycopg.types.json import Jsonb

from app import tracing
from app.priorities import Route
from app.states import JobState
from app.store import admission, endings
from app.store.pool import Conn, Database, fetch_txn, q, retried
from app.store.records import Admission, Job, JobEvent, OutboxRow


@dataclass(frozen=True)
class NewRow:
    """A validated job, as the insert takes it."""

    id: uuid.UUID
    kind: str
    payload: Any
    max_attempts: int
    timeout_seconds: int
    idempotency_key: str | None
    request_hash: str
    # When to run it: at ``run_at``, or ``delay_seconds`` after the insert (the database's
    # clock); neither, or a time already past: now.
    run_at: dt.datetime | None = None
    delay_seconds: float | None = None
    priority: str = "normal"  # which queue its messages go to (app/priorities.py)
    # The run's deadline: at ``deadline``, or ``deadline_seconds`` after the insert (the
    # database's clock); neither: none.
    deadline: dt.datetime | None = None
    deadline_seconds: float | None = None
    # A re-run's original; a fork's original and the step it runs from (the effects
    # before it are copied into the new job by the insert); a note for its first event.
    rerun_of: uuid.UUID | None = None
    forked_from: uuid.UUID | None = None
    fork_step: str | None = None
    note: str | None = None
    # Flow control by key (app/services/flow.py): the key, and the kind's limits per key.
    flow_key: str | None = None
    key_concurrency: int | None = None
    key_rate: int | None = None
    key_rate_seconds: float | None = None
    # Debounce: written waiting this long on a timer (wait_key 'debounce'), replaced by a
    # newer job of its key meanwhile.
    debounce_seconds: float | None = None
    # What the submission does when a job of the key is active (app/kinds/flow.py).
    if_active: str = "enqueue"


@dataclass(frozen=True)
class Limits:
    """The deployment's defaults; a tenant's overrides in tenant_limits win over them."""

    rate_per_second: float
    burst: int
    max_in_flight: int
    # The tenant's window on the queue: max_running x window_per_slot jobs with a message
    # or a lease; past it a job to run now is written parked (migration 0013).
    max_running: int = 100
    window_per_slot: int = 2


@dataclass(frozen=True)
class Insertion:
    """What insert_jobs answered: its verdict, and the jobs it wrote with their outbox rows
    (a delayed job, written waiting on its timer, has none: ``delayed`` lists them)."""

    admission: Admission
    jobs: list[Job]
    outbox: list[OutboxRow]
    delayed: list[uuid.UUID]
    # False: a fork's step was no longer among its original's effects; nothing written.
    fork_ok: bool = True


@retried
async def insert(
    db: Database,
    rows: Sequence[NewRow],
    *,
    tenant: str,
    limits: Limits,
    key_id: str | None,
) -> Insertion:
    """Admit and write the jobs (all or none) with their events and outbox rows, in one
    statement. ``key_id``: the caller's API key, whose revocation the statement checks.
    The pool's last counts of the tenant bound this admission's (store/admission.py)."""
    async with db.connection() as conn:
        return await insert_txn(
            conn, rows, tenant=tenant, limits=limits, key_id=key_id, counts=db.admission
        )


async def insert_txn(
    conn: Conn,
    rows: Sequence[NewRow],
    *,
    tenant: str,
    limits: Limits,
    key_id: str | None,
    counts: admission.Counts | None = None,
) -> Insertion:
    """As ``insert``, inside the caller's transaction (a schedule's slot: the job and the
    schedule's next slot commit together). With no ``counts`` it counts the limits in full."""
    known = counts.params(tenant) if counts is not None else admission.UNKNOWN
    written = await fetch_txn(
        conn,
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
            "run_ats": [r.run_at for r in rows],
            "delays": [r.delay_seconds for r in rows],
            # Each job's trace continues from the span current at its submission.
            "trace_contexts": [tracing.for_new_job() for _ in rows],
            "priorities": [r.priority for r in rows],
            "deadlines": [r.deadline for r in rows],
            "deadline_seconds": [r.deadline_seconds for r in rows],
            "rerun_ofs": [r.rerun_of for r in rows],
            "forked_froms": [r.forked_from for r in rows],
            "fork_steps": [r.fork_step for r in rows],
            "notes": [r.note for r in rows],
            "flow_keys": [r.flow_key for r in rows],
            "key_concurrencies": [r.key_concurrency for r in rows],
            "key_rates": [r.key_rate for r in rows],
            "key_rate_seconds": [r.key_rate_seconds for r in rows],
            "debounces": [r.debounce_seconds for r in rows],
            "rate": limits.rate_per_second,
            "burst": limits.burst,
            "max_in_flight": limits.max_in_flight,
            "max_running": limits.max_running,
            "window_per_slot": limits.window_per_slot,
            "key_id": key_id,
            **known,
        },
    )
    if counts is not None:
        counts.learn(tenant, written[0])
    made = [row for row in written if row["id"] is not None]
    return Insertion(
        # The statement answers its verdict on every row, and one row when it wrote none.
        admission=Admission.from_row(written[0]),
        jobs=[Job.from_row(row) for row in made],
        outbox=[
            OutboxRow(
                id=row["outbox_id"],
                job_id=row["id"],
                trace_context=row["trace_context"],
                tenant=row["tenant"],
                priority=row["priority"],
            )
            for row in made
            if row["outbox_id"] is not None
        ],
        delayed=[row["id"] for row in made if row["state"] == JobState.WAITING],
        fork_ok=bool(written[0]["fork_ok"]),
    )


async def mark_delayed_wakeups(
    db: Database, job_ids: Sequence[uuid.UUID], *, cap: float
) -> list[tuple[Route, float]]:
    """Of these delayed jobs, mark and return (the job's route, delay) for each due within
    ``cap`` seconds whose wake-up nobody sent yet: the caller sends them now. The others
    are left to the sweeper (their wake_sent_at stays NULL)."""
    rows = await db.fetch(q("mark_delayed_wakeups"), {"ids": list(job_ids), "cap": cap})
    return [(_route(row), float(row["delay"])) for row in rows]


async def routes(db: Database, job_ids: Sequence[uuid.UUID]) -> dict[uuid.UUID, Route]:
    """Where each of these jobs' messages go (the ones that exist)."""
    rows = await db.fetch(q("job_routes"), {"ids": list(job_ids)})
    return {row["id"]: _route(row) for row in rows}


def _route(row: Any) -> Route:
    return Route.of(row["id"], row["tenant"], row["priority"])


async def by_idempotency_keys(db: Database, tenant: str, keys: Sequence[str]) -> list[Job]:
    rows = await db.fetch(
        q("jobs_by_idempotency_keys"), {"tenant": tenant, "idempotency_keys": list(keys)}
    )
    return [Job.from_row(row) for row in rows]


async def made_from(
    db: Database, job_id: uuid.UUID, idempotency_key: str, tenant: str | None
) -> Job | None:
    """The re-run or fork of ``job_id`` made under ``idempotency_key`` (a NULL tenant: any)."""
    row = await db.fetch_one(
        q("jobs_made_from"), {"id": job_id, "key": idempotency_key, "tenant": tenant}
    )
    return Job.from_row(row) if row else None


async def get(db: Database, job_id: uuid.UUID) -> Job | None:
    row = await db.fetch_one(q("get_job"), {"id": job_id})
    return Job.from_row(row) if row else None


async def get_for_tenant(db: Database, job_id: uuid.UUID, tenant: str | None) -> Job | None:
    """The job if it is ``tenant``'s; a None tenant is the operator's view (any tenant)."""
    row = await db.fetch_one(q("get_job_for_tenant"), {"id": job_id, "tenant": tenant})
    return Job.from_row(row) if row else None


async def by_ids(db: Database, job_ids: Sequence[uuid.UUID]) -> list[Job]:
    rows = await db.fetch(q("jobs_by_ids"), {"ids": list(job_ids)})
    return [Job.from_row(row) for row in rows]


async def page(
    db: Database,
    *,
    tenant: str | None,
    state: JobState | None,
    kind: str | None,
    after: tuple[dt.datetime, uuid.UUID] | None,
    limit: int,
) -> list[Job]:
    """Newest first, after the (created_at, id) cursor of the last job seen."""
    rows = await db.fetch(
        q("list_jobs"),
        {
            "tenant": tenant,
            "state": state.value if state else None,
            "kind": kind,
            "after_created": after[0] if after else None,
            "after_id": after[1] if after else None,
            "limit": limit,
        },
    )
    return [Job.from_row(row) for row in rows]


async def events(db: Database, job_id: uuid.UUID) -> list[JobEvent]:
    return [JobEvent.from_row(row) for row in await db.fetch(q("job_events"), {"id": job_id})]


async def cancel_waiting(db: Database, job_id: uuid.UUID, *, detail: str) -> bool:
    """Cancel a job no live lease holds; False when a live lease holds it (or it finished).
    Its end is counted, and its children's that the cancel cancelled (store/endings.py)."""
    return bool(await endings.cancelling(db, q("cancel_waiting"), {"id": job_id, "detail": detail}))


async def cancel_waiting_txn(conn: Conn, job_id: uuid.UUID, *, detail: str) -> list[dict[str, Any]]:
    """As cancel_waiting, inside the caller's transaction (a suspension that finds a cancel
    asked for): the ends it wrote, its children's included, for the caller to count
    (endings.count) once it commits; empty when it changed nothing."""
    rows = await fetch_txn(conn, q("cancel_waiting"), {"id": job_id, "detail": detail})
    return [*rows, *await endings.below(conn, rows)]


async def request_cancel(db: Database, job_id: uuid.UUID) -> bool:
    """Flag a leased job for its worker's heartbeat; False when no lease holds it. Its
    children no live lease holds are cancelled at once (the flag's trigger): counted."""
    return bool(await endings.cancelling(db, q("request_cancel"), {"id": job_id}))


async def request_cancel_txn(conn: Conn, job_id: uuid.UUID) -> list[dict[str, Any]]:
    """As request_cancel, inside the caller's transaction (a bulk cancel's batch): the
    ends its trigger wrote (the job's children no live lease holds) and the job's own row,
    for the caller to count (endings.count) once it commits; empty when no lease holds it."""
    rows = await fetch_txn(conn, q("request_cancel"), {"id": job_id})
    return [*rows, *await endings.below(conn, rows)]


async def waiting_routes(db: Database) -> list[Route]:
    """Jobs that need a message, oldest first (for a queue created anew): their routes."""
    return [_route(row) for row in await db.fetch(q("waiting_jobs"))]


async def reruns_of(db: Database, job_id: uuid.UUID, *, limit: int) -> list[Job]:
    """The jobs re-run or forked from this one, oldest first (the first ``limit``)."""
    rows = await db.fetch(q("reruns_of"), {"id": job_id, "limit": limit})
    return [Job.from_row(row) for row in rows]
