"""Submitting jobs: validate them (``app.services.job_checks``; its ``NewJob`` and
``validated`` are named here too), admit and write them with their outbox rows in one
statement, then send their messages through the one outbox send path.

Reading and cancelling jobs live in ``app.services.jobs``, the send path in
``app.services.outbox``.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import logging
import math
import uuid
from dataclasses import dataclass
from typing import Any

from app import crashpoints, errors, metrics, store
from app.services import auth, flow, gather, job_checks, outbox, wakeups
from app.services.job_checks import NewJob as NewJob
from app.services.job_checks import validated as validated
from app.settings.config import Settings
from app.store.jobs import NewRow
from app.store.records import Admission, OutboxRow
from app.transport import Transport

log = logging.getLogger(__name__)

DEFAULT_TENANT = "default"
MAX_IDEMPOTENCY_KEY = job_checks.MAX_IDEMPOTENCY_KEY
# Jobs one POST /v1/jobs/batch may carry (at most the default burst, so a batch fits it).
MAX_SUBMIT_BATCH = 100
# Retry-After for a tenant at its cap of unfinished jobs: jobs finish on their own time.
IN_FLIGHT_RETRY_AFTER_SECONDS = 5


@dataclass(frozen=True)
class Submitted:
    job: dict[str, Any]
    created: bool  # False: an earlier request with the same Idempotency-Key made it
    # True: not written; its key's active job answered instead (if_active drop_new).
    dropped: bool = False


async def submit(
    settings: Settings,
    db: store.Database,
    queue: Transport,
    *,
    kind: str,
    payload: Any,
    max_attempts: int | None = None,
    timeout_seconds: int | None = None,
    idempotency_key: str | None = None,
    tenant: str = DEFAULT_TENANT,
    sender: outbox.OutboxSender | None = None,
    key_id: str | None = None,
    run_at: dt.datetime | None = None,
    delay_seconds: float | None = None,
    priority: str | None = None,
    deadline: dt.datetime | None = None,
    deadline_seconds: float | None = None,
    key: str | None = None,
    if_active: str | None = None,
) -> Submitted:
    """Validate, write the job and its outbox row in one statement, commit, then send
    (a delayed job: written waiting on its timer, its wake-up sent delayed)."""
    new = NewJob(
        kind,
        payload,
        max_attempts,
        timeout_seconds,
        idempotency_key,
        run_at,
        delay_seconds,
        priority,
        deadline,
        deadline_seconds,
        key=key,
        if_active=if_active,
    )
    (submitted,) = await submit_many(
        settings, db, queue, [new], tenant=tenant, sender=sender, key_id=key_id
    )
    return submitted


async def submit_many(
    settings: Settings,
    db: store.Database,
    queue: Transport,
    jobs: list[NewJob],
    *,
    tenant: str = DEFAULT_TENANT,
    sender: outbox.OutboxSender | None = None,
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
    rows = _validated_batch(settings, jobs, batch)
    keyed: flow.KeyedInsertion | None = None
    positions: list[int] = []
    if any(flow.decides(r) for r in rows):
        # A kind that decides per key: its keys locked, looked at, replaced (services/flow.py).
        keyed = await flow.insert(
            db, rows, tenant=tenant, limits=limits(settings), key_id=key_id, batch=batch
        )
        if keyed.written is None:  # every job answered by its key's active job (drop_new)
            return [
                Submitted(job=j.to_dict(), created=False, dropped=True)
                for j in keyed.answered.values()
            ]
        written = keyed.written
        flow.after_commit(keyed, rows)
        positions = [i for i in range(len(rows)) if i not in keyed.answered]
        rows = [rows[i] for i in positions]
    elif batch:
        written = await store.jobs.insert(
            db, rows, tenant=tenant, limits=limits(settings), key_id=key_id
        )
    else:  # one job: in one statement with the process's concurrent ones (services/gather.py)
        written = await gather.gatherer(db).insert(
            rows, tenant=tenant, limits=limits(settings), key_id=key_id
        )
    verdict = written.admission
    if not verdict.key_ok:
        raise auth.invalid_key()  # revoked since this process verified it: no replay either
    if not written.fork_ok:
        raise errors.Conflict("the fork's step is no longer recorded (its job was pruned?)")
    for job in written.jobs:
        if job.forked_from is not None:  # its copied effects committed with it, unsent
            crashpoints.hit(crashpoints.Point.AFTER_FORK_INSERTED, job_id=job.id)
    made = {job.id: job for job in written.jobs}
    if verdict.conflict_ord is not None:
        _conflict(_position(keyed, positions, verdict.conflict_ord - 1), batch)
    pending = [r.idempotency_key for r in rows if r.id not in made and r.idempotency_key]
    earlier = (
        {j.idempotency_key: j for j in await store.jobs.by_idempotency_keys(db, tenant, pending)}
        if pending
        else {}
    )
    out: list[Submitted] = []
    for i, r in enumerate(rows):
        if r.id in made:
            out.append(Submitted(job=made[r.id].to_dict(), created=True))
            continue
        existing = earlier.get(r.idempotency_key) if r.idempotency_key is not None else None
        if existing is None:
            # Refused by admission (a replay found nothing to refuse).
            _refuse(verdict, batch)
            raise errors.StoreError("the job was neither written nor refused")  # pragma: no cover
        if existing.request_hash != r.request_hash:
            # A concurrent request took the key between the statement's look and its write.
            _conflict(_position(keyed, positions, i), batch)
        out.append(Submitted(job=existing.to_dict(), created=False))
    if keyed is not None and keyed.answered:
        # The jobs a policy answered with their key's active job (drop_new), in place.
        for i in sorted(keyed.answered):
            out.insert(i, Submitted(job=keyed.answered[i].to_dict(), created=False, dropped=True))
    for sub in out:
        metrics.count(
            metrics.SUBMISSIONS, kind=str(sub.job["kind"]), replay=str(not sub.created).lower()
        )
    if written.outbox:
        await send_after_commit(db, queue, written.outbox, sender)
    if written.delayed:
        await _send_delayed(settings, db, queue, written.delayed)
    return out


def _position(keyed: flow.KeyedInsertion | None, positions: list[int], index: int) -> int:
    """A written row's index in the request (a policy may have answered some before)."""
    return positions[index] if keyed is not None else index


def limits(settings: Settings) -> store.jobs.Limits:
    """The deployment's default limits (a tenant's overrides win over them in the insert)."""
    return store.jobs.Limits(
        rate_per_second=settings.rate_limit_per_second,
        burst=settings.rate_limit_burst,
        max_in_flight=settings.max_jobs_in_flight,
        max_running=settings.max_running_per_tenant,
        window_per_slot=settings.queue_window_per_slot,
    )


def _validated_batch(settings: Settings, jobs: list[NewJob], batch: bool) -> list[NewRow]:
    """Each job validated, with its index in the message; no key twice in one batch."""
    rows: list[NewRow] = []
    for i, new in enumerate(jobs):
        try:
            rows.append(validated(settings, new))
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
    return rows


def _conflict(index: int, batch: bool) -> None:
    where = f"jobs[{index}]: " if batch else ""
    raise errors.Conflict(
        f"{where}Idempotency-Key was already used with a different request body; "
        "use a new key for a new job"
    )


async def send_after_commit(
    db: store.Database, queue: Transport, rows: list[OutboxRow], sender: outbox.OutboxSender | None
) -> None:
    """The fast path: the jobs are committed; send their messages now. A failed send is
    the outbox relay's to retry: the caller still gets its 202."""
    for row in rows:
        crashpoints.hit(crashpoints.Point.AFTER_OUTBOX_COMMIT, job_id=row.job_id)
    try:
        if sender is not None:
            await asyncio.gather(*(sender.send(row) for row in rows))
        else:
            await outbox.send(db, queue, rows)
    except errors.TaskleaseError as exc:
        log.warning(
            "fast-path send failed; the outbox relay will send it: %s",
            exc,
            extra={"job_id": rows[0].job_id, "count": len(rows)},
        )


async def _send_delayed(
    settings: Settings, db: store.Database, queue: Transport, job_ids: list[uuid.UUID]
) -> None:
    """The delayed jobs are committed, waiting on their timers: the wake-ups due within
    SQS's delay cap go now with their delay; later ones are the sweeper's, as is any this
    process dies before sending (their wake_sent_at is NULL until marked here)."""
    for job_id in job_ids:
        crashpoints.hit(crashpoints.Point.AFTER_OUTBOX_COMMIT, job_id=job_id)
    try:
        due = await store.jobs.mark_delayed_wakeups(
            db, job_ids, cap=settings.max_message_delay_seconds
        )
        if due:
            await wakeups.send(queue, due, path="submit")
    except errors.TaskleaseError as exc:
        log.warning(
            "delayed wake-up not sent; the sweeper will send it: %s",
            exc,
            extra={"job_id": job_ids[0], "count": len(job_ids)},
        )


def _refuse(verdict: Admission, batch: bool = False) -> None:
    """429 for a refused admission, with when to come back; a batch that could never fit
    the tenant's burst is a 422 instead (waiting would not help)."""
    wanted = verdict.wanted
    if not verdict.rate_ok:
        if wanted > verdict.burst:
            raise errors.BadRequest(
                f"this batch has {wanted} new jobs, more than this tenant's burst of "
                f"{verdict.burst}: send at most {verdict.burst} per request"
            )
        wait = math.ceil(float(verdict.wait_seconds or 1))
        raise errors.TooManyRequests(
            f"rate limit: this tenant may submit {verdict.rate:g} jobs per second"
            + (f" (this batch asks for {wanted})" if batch else ""),
            retry_after=wait,
        )
    if not verdict.flight_ok:
        raise errors.TooManyRequests(
            f"this tenant has too many unfinished jobs for {wanted} more: its limit is "
            f"{verdict.max_in_flight}; submit more as they finish"
            if batch
            else f"this tenant already has {verdict.max_in_flight} unfinished jobs, its "
            "limit; submit more as they finish",
            retry_after=IN_FLIGHT_RETRY_AFTER_SECONDS,
        )
