"""A delivery the claim took, up to the kind's code: the job's lease (with the database's
clock's lead over this process's), and the ends a claimed job meets before it runs: its
attempt budget used up, a kind or payload that is bad (both dead-lettered), or a version
this worker does not serve (handed back). The engine runs what is left
(app/worker/engine.py); a delivery the claim did not take is app/worker/unclaimed.py."""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Mapping
from typing import Any

from app import crashpoints, errors, kinds, metrics
from app.states import JobState
from app.store.records import Job
from app.transport import codec
from app.worker import counting, deadlines, traces, versions
from app.worker.leases import LambdaContext, Lease
from app.worker.outcomes import Outcomes

log = logging.getLogger(__name__)


def lease(
    record: Mapping[str, Any],
    job: Job,
    token: uuid.UUID,
    answered: float,
    owner: str,
    from_state: str | None,
) -> Lease:
    """The lease of ``job``, claimed under ``token`` (from ``from_state``) by ``owner``, its
    claim's answer arrived at ``answered`` (time.time())."""
    job_id = job.id
    fields = {
        "job_id": job_id,
        "kind": job.kind,
        "attempt": job.attempt,
        "lease_owner": owner,
    }
    # A job's lifecycle is its timeline (job_events); at INFO a job logs its end only.
    log.debug("claimed", extra={**fields, "state": JobState.LEASED})
    if job.runs == 0 and from_state == JobState.QUEUED:
        # A job submitted to run now, at its first lease (both times the database's).
        metrics.observe(
            metrics.QUEUED_TO_LEASED,
            (job.updated_at - job.created_at).total_seconds(),
            kind=job.kind,
        )
    crashpoints.hit(crashpoints.Point.AFTER_CLAIM, **fields)
    # The database's clock minus ours, from the claim's now() (updated_at) and the
    # time its answer arrived, so the kind's clock starts at the claim's database
    # time and never runs ahead of the database: a timer the claim found due is due
    # for the kind's code too, and one not yet due cannot pass early by the claim's
    # latency (measured from before the claim, a slow claim pushed the clock ahead
    # by as long as it took, and a redelivered nap woke ~100 ms early).
    offset = job.updated_at.timestamp() - answered
    return Lease(
        job_id=job_id,
        token=token,
        receipt_handle=str(record.get("receiptHandle", "")),
        received_at=time.time(),
        generation=job.redrives,
        fields=fields,
        clock_offset=offset,
        traceparent=codec.attribute(record, codec.ATTR_TRACEPARENT) or job.trace_context,
        route=job.route,
        deadline=deadlines.on_this_clock(job, offset),
    )


async def runnable(
    outcomes: Outcomes,
    lease: Lease,
    job: Job,
    record: Mapping[str, Any],
    context: LambdaContext | None,
) -> tuple[kinds.Kind[Any, Any, Any], Any] | bool:
    """The kind and parsed payload ``job`` runs with, or, when it is not to run, how its
    claim ended (True: delete the message): dead-lettered when its attempt budget is spent
    or its kind or payload is bad, handed back when pinned to a version this worker does
    not serve."""
    if job.attempt > job.max_attempts:
        # Every earlier attempt died without finishing (a crash, a kill, a timeout).
        reason = f"worker never finished: attempt budget of {job.max_attempts} used up" + (
            f"; last error: {job.last_error}" if job.last_error else ""
        )
        return counting.ended(
            job,
            "dead_lettered",
            await outcomes.dead_letter(lease, JobState.LEASED, reason),
        )
    try:
        drain = versions.draining(outcomes.settings, context)
        # A drain worker (older code) hands back a kind it does not know: it is new.
        known = kinds.get(job.kind) if not drain or job.kind in kinds.REGISTRY else None
        served = versions.serving(job, known, drain=drain)
        if served is None:  # pinned to a version this worker does not serve
            return await versions.not_served(outcomes, lease, job, record, drain=drain)
        kind = served
        payload = kind.parse(job.payload)
    except errors.BadRequest as exc:
        traces.outcome("dead_lettered", exc)
        return counting.ended(
            job,
            "dead_lettered",
            await outcomes.dead_letter(lease, JobState.LEASED, str(exc)),
        )
    return kind, payload
