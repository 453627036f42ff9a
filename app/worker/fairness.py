"""Fairness between tenants, in the worker: the running cap's hand-backs, and releasing
parked jobs as leases end.

A delivery whose tenant is at its running cap (TASKLEASE_MAX_RUNNING_PER_TENANT, or
`tasklease limits set --max-running`): the claim wrote nothing, no attempt is used, and
the message goes back to the queue for a while. How long grows with the tenant's
backlog per slot, so a tenant with thousands of jobs queued does not have its messages
received over and over while another tenant's jobs wait behind them.

Every receive counts towards the redrive policy's maxReceiveCount, and a job whose
message SQS moves to the DLQ is dead-lettered by the sweeper. A message close to that
count is replaced by a fresh one (same job, count 0) instead of handed back: the job
cannot be dead-lettered for having waited its turn. A crash between the send and the
delete leaves two messages for one job, which the job row makes harmless.

A job submitted past its tenant's window on the queue is parked (no message). When a
lease of a tenant with parked jobs ends, the worker releases the oldest ones the window
has room for: unparked with an outbox row in one statement, then sent. A crash between
the two leaves the outbox rows to the relay; a release nobody makes (the tenant's last
lease ended before its flood was parked) is the sweeper's (release_all).
"""

from __future__ import annotations

import contextlib
import logging
import math
import random
from collections.abc import Mapping
from typing import Any

from app import batching, errors, metrics
from app.config import Settings
from app.states import JobState
from app.store.leases import Verdict
from app.transport import Transport, codec

log = logging.getLogger(__name__)

# The longest hand-back, in units of TASKLEASE_RUNNING_CAP_DELAY_SECONDS.
MAX_DELAY_FACTOR = 30
# Receives left before maxReceiveCount at which the message is replaced, not handed back.
RECEIVES_MARGIN = 3


def hand_back_delay(settings: Settings, *, backlog: int, cap: int) -> float:
    """Seconds before the message comes back: the base delay times the tenant's backlog
    per slot (at least 1, at most MAX_DELAY_FACTOR), jittered down by up to half so a
    burst of hand-backs does not come back as one burst."""
    factor = min(MAX_DELAY_FACTOR, max(1.0, backlog / max(1, cap)))
    return settings.running_cap_delay_seconds * factor * random.uniform(0.5, 1.0)  # noqa: S311 - jitter


def receive_count(record: Mapping[str, Any]) -> int:
    """SQS's ApproximateReceiveCount of this delivery (0 when it does not say)."""
    raw = (record.get("attributes") or {}).get("ApproximateReceiveCount")
    try:
        return int(str(raw))
    except (TypeError, ValueError):
        return 0


async def defer(
    settings: Settings, queue: Transport, record: Mapping[str, Any], verdict: Verdict
) -> bool:
    """Hand the message back (False: leave it) or replace it with a fresh, delayed one
    (True: delete this one). Nothing is written to the job."""
    job = verdict.job
    delay = hand_back_delay(settings, backlog=verdict.backlog, cap=verdict.cap)
    fields = {"job_id": job.id, "kind": job.kind, "tenant": job.tenant, "delay": round(delay, 1)}
    near_limit = receive_count(record) >= settings.max_receive_count - RECEIVES_MARGIN
    # A redrive's message carries its generation, which a fresh message would not.
    if near_limit and job.state != JobState.DEAD_LETTERED:
        traceparent = codec.attribute(record, codec.ATTR_TRACEPARENT) or job.trace_context
        failed = ["unsent"]
        with contextlib.suppress(errors.QueueError):
            failed = await queue.send_jobs(
                [job.route], delay_seconds=math.ceil(delay), traces={str(job.id): traceparent}
            )
        if not failed:
            metrics.count(metrics.DEFERRED, how="resent")
            log.info("tenant at its running cap: message replaced", extra=fields)
            return True
    with contextlib.suppress(errors.QueueError):
        await queue.change_visibility(str(record.get("receiptHandle", "")), delay)
    metrics.count(metrics.DEFERRED, how="visibility")
    log.debug("tenant at its running cap: message handed back", extra=fields)
    return False


async def release(releases: batching.Batcher[str, None], tenant: str) -> None:
    """Release what the tenant's window has room for; a failure is left to the sweeper."""
    try:
        await releases.submit(tenant)
    except (errors.StoreError, errors.QueueError) as exc:
        log.warning("releasing parked jobs failed; the sweeper will: %s", exc)
