"""Fairness between tenants, in the worker: what becomes of a delivery whose tenant is at
its running cap (TASKLEASE_MAX_RUNNING_PER_TENANT, or `tasklease limits set
--max-running`), and releasing parked jobs as leases end.

The claim wrote nothing but, for a queued job, ``parked``: no attempt is used. A parked
job goes out again, with a fresh message, when one of its tenant's leases ends (the
worker that ended it releases one parked job per free slot); its old message only comes
back as a backstop, late (TASKLEASE_RUNNING_CAP_DELAY_SECONDS x MAX_DELAY_FACTOR), in
case no release does. Any other deferred delivery (a retry, a due wake-up) goes back for
the base delay times its tenant's backlog per slot.

Every receive counts towards the redrive policy's maxReceiveCount, and a job whose
message SQS moves to the DLQ is dead-lettered by the sweeper. A message close to that
count is replaced by a fresh one (same job, count 0) instead of handed back: the job
cannot be dead-lettered for having waited its turn. A crash between the send and the
delete leaves two messages for one job, which the job row makes harmless.
"""

from __future__ import annotations

import contextlib
import logging
import math
import random
from collections.abc import Mapping
from typing import Any

from app import batching, errors, metrics
from app.settings.config import Settings
from app.states import JobState
from app.store.leases import Verdict
from app.transport import Transport, codec

log = logging.getLogger(__name__)

# The longest hand-back, in units of TASKLEASE_RUNNING_CAP_DELAY_SECONDS.
MAX_DELAY_FACTOR = 30
# Receives left before maxReceiveCount at which the message is replaced, not handed back.
RECEIVES_MARGIN = 3
# The claim's held_by, as the key_held metric names it.
_HELD_BY = {"key": "concurrency", "rate": "rate"}


def hand_back_delay(settings: Settings, *, backlog: int, cap: int) -> float:
    """Seconds before the message comes back: the base delay times the tenant's backlog
    per slot (at least 1, at most MAX_DELAY_FACTOR), jittered down by up to half so a
    burst of hand-backs does not come back as one burst."""
    return _jittered(settings, min(MAX_DELAY_FACTOR, max(1.0, backlog / max(1, cap))))


def _jittered(settings: Settings, factor: float) -> float:
    """The base delay times ``factor``, less up to half of it at random."""
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
    (True: delete this one). The claim wrote nothing but, for a queued job, ``parked``."""
    job = verdict.job
    if verdict.held_by is not None:
        metrics.count(metrics.KEY_HELD, kind=job.kind, by=_HELD_BY[verdict.held_by])
    if verdict.parked_now:
        # Parked: a lease's end releases it with a fresh message. This one comes back
        # only as a backstop, should no release come (then it is claimed or parked again).
        delay = _jittered(settings, MAX_DELAY_FACTOR)
    elif verdict.held_by == "rate" and verdict.key_wait is not None:
        # Its key's rate: back when the oldest claim in the period leaves it (a little
        # after, spread so a key's waiting jobs do not all come back at once).
        delay = max(1.0, verdict.key_wait) * random.uniform(1.0, 1.2)  # noqa: S311 - jitter
    else:
        delay = hand_back_delay(settings, backlog=verdict.backlog, cap=verdict.cap)
    why = "its key's limit" if verdict.held_by else "tenant at its running cap"
    fields = {
        "job_id": job.id,
        "kind": job.kind,
        "tenant": job.tenant,
        "delay": round(delay, 1),
        "held_by": verdict.held_by or "tenant",
    }
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
            log.info("%s: message replaced", why, extra=fields)
            return True
    with contextlib.suppress(errors.QueueError):
        await queue.change_visibility(str(record.get("receiptHandle", "")), delay)
    metrics.count(metrics.DEFERRED, how="visibility")
    log.debug("%s: message handed back", why, extra=fields)
    return False


async def release(releases: batching.Batcher[str, None], tenant: str) -> None:
    """Release a parked job of the tenant for each free slot; a failure is left to the
    sweeper."""
    try:
        await releases.submit(tenant)
    except (errors.StoreError, errors.QueueError) as exc:
        log.warning("releasing parked jobs failed; the sweeper will: %s", exc)
