"""A worker's side of a run's deadline (docs/explain/design.md#deadlines): a delivery of
a job past its deadline ends it at the claim instead of running it, and a running
attempt is stopped at the deadline the way a cancel stops it (``Keeper`` cancels its
task: app/worker/leases.py), then the end is written fenced by the lease token. The
sweeper ends the jobs no worker holds (app/services/deadlines.py)."""

from __future__ import annotations

import logging
import time
import uuid

from app import crashpoints, metrics, store
from app.states import JobState
from app.store.records import Job
from app.worker import counting, traces
from app.worker.leases import Lease

log = logging.getLogger(__name__)


def passed_at_claim(job: Job) -> bool:
    """The claim found the job past its deadline (both times the database's: the claim's
    now() is the row's updated_at)."""
    return job.deadline is not None and job.deadline <= job.updated_at


def on_this_clock(job: Job, clock_offset: float) -> float | None:
    """The job's deadline in this process's time.time(), given the database's clock's
    lead over it (Lease.clock_offset); None without a deadline."""
    return None if job.deadline is None else job.deadline.timestamp() - clock_offset


async def end(
    db: store.Database,
    lease: Lease,
    job: Job,
    from_state: JobState,
    started: float | None,
    parked_behind: set[uuid.UUID],
) -> bool:
    """Write the job's end, dead-lettered "deadline passed" (its children cancelled in the
    same statement), fenced by the lease token; whether it took. A job that ended with
    parked jobs of its tenant behind it joins ``parked_behind`` (the engine releases)."""
    crashpoints.hit(crashpoints.Point.BEFORE_DEADLINE_END, **lease.fields)
    took = await store.deadlines.expire_held(db, lease.job_id, lease.token, from_state=from_state)
    if took is None:
        log.warning("deadline end refused: lease lost", extra=lease.fields)
        traces.outcome("lease_lost")
        return False
    if took.has_parked:
        parked_behind.add(lease.job_id)
    traces.outcome("dead_lettered")
    metrics.count(metrics.DEAD_LETTERS, by="deadline")
    log.warning(
        "deadline passed: ended %s",
        "at the claim" if started is None else f"after {time.monotonic() - started:.1f} s",
        extra={**lease.fields, "state": JobState.DEAD_LETTERED},
    )
    return counting.ended(job, "dead_lettered", True, started)
