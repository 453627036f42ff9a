"""Which version of its kind's code a claimed job runs on (docs/howto/kind-versions.md).

A kind declared ``on_version_change="resume"`` (the default) runs every job on the code
deployed now, its replay checked step by step (app/kinds/steps.py). A kind declared
``"pin"`` runs a job that started on another version only on that version: a worker that
serves it (registered side by side: app/kinds/registry.py) runs it there; one that does
not hands the lease back unrun, the attempt given back, and the message comes back
after NOT_SERVED_VISIBILITY_SECONDS for a worker that does (a pool, a Lambda alias of
the old version) to claim. The policy is the one of the code deployed now.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Mapping
from typing import Any

from app import crashpoints, errors, kinds
from app.settings.config import Settings
from app.states import JobState
from app.store.records import Job
from app.worker import fairness
from app.worker.leases import Lease
from app.worker.outcomes import Outcomes

log = logging.getLogger(__name__)

AnyKind = kinds.Kind[Any, Any, Any]

# A pinned job's message comes back after this long when the worker that received it
# does not serve its version: long enough not to spin while no worker of that version
# runs, short enough that one that does picks it up soon.
NOT_SERVED_VISIBILITY_SECONDS = 10
# The Lambda alias (infra/lambda.tf, worker_drain_version) that keeps an older worker
# version subscribed while its pinned jobs drain. Invoked through it, a worker runs only
# jobs pinned to a version it serves and hands every other back at once (after this
# long): new jobs and "resume" kinds are the new code's.
DRAIN_ALIAS = "drain"
DRAIN_HANDBACK_SECONDS = 1


def draining(settings: Settings, context: object | None) -> bool:
    """Whether this worker drains: TASKLEASE_WORKER_DRAIN, or an invocation through the
    drain alias (its ARN's qualifier)."""
    arn = str(getattr(context, "invoked_function_arn", "") or "")
    return settings.worker_drain or arn.endswith(f":{DRAIN_ALIAS}")


def serving(job: Job, current: AnyKind | None, *, drain: bool = False) -> AnyKind | None:
    """The code ``job`` runs on: ``current`` (the version new jobs start on; None: a kind
    this process does not know), or under "pin" the version the job started on; None when
    this process does not serve it. ``drain``: only a started job, on the version it
    started on, whatever the policy this (older) code declared: running a job on its own
    version is always safe, and the current code may pin what this code did not."""
    if drain:
        if current is None or job.kind_version is None:
            return None
        return kinds.REGISTRY.version_of(job.kind, job.kind_version)
    assert current is not None  # an unknown kind is dead-lettered by kinds.get
    if current.on_version_change != "pin" or job.kind_version in (None, current.version):
        return current
    assert job.kind_version is not None
    return kinds.REGISTRY.version_of(job.kind, job.kind_version)


async def not_served(
    outcomes: Outcomes, lease: Lease, job: Job, record: Mapping[str, Any], *, drain: bool = False
) -> bool:
    """Hand a pinned job whose version this worker does not serve back, unrun and with
    its attempt given back (False: its message is to come back). A message near the
    queue's maxReceiveCount is replaced by a fresh one instead (True: delete this one), as
    the running cap's deferral does: a job that waits long for a worker of its version is
    never moved to the DLQ by its bounces."""
    served = ", ".join(kinds.REGISTRY.versions(job.kind)) or "none"
    detail = (
        f"kind {job.kind!r} is pinned: this job started on version {job.kind_version}, "
        f"and this worker serves version {served}: handed back for a worker that serves it"
    )
    if drain:
        detail = (
            f"a drain worker runs only jobs that started on a version it serves ({job.kind} "
            f"{served}): handed back for the current code"
        )
    # The drain alias hands back every new job while it runs: routine, not a warning.
    (log.info if drain else log.warning)(
        "%s", detail, extra={**lease.fields, "state": JobState.QUEUED}
    )
    handed = await outcomes.hand_back(
        lease,
        from_state=JobState.LEASED,
        detail=detail,
        visibility=DRAIN_HANDBACK_SECONDS if drain else NOT_SERVED_VISIBILITY_SECONDS,
    )
    crashpoints.hit(crashpoints.Point.AFTER_VERSION_HANDED_BACK, **lease.fields)
    settings = outcomes.settings
    if fairness.receive_count(record) < settings.max_receive_count - fairness.RECEIVES_MARGIN:
        return handed
    failed = ["unsent"]
    with contextlib.suppress(errors.QueueError):
        failed = await outcomes.queue.send_jobs(
            [job.route],
            delay_seconds=NOT_SERVED_VISIBILITY_SECONDS,
            traces={str(job.id): lease.traceparent},
        )
    if failed:  # this message comes back as handed back; the next receive tries again
        return handed
    log.info("pinned job's message replaced near maxReceiveCount", extra=lease.fields)
    return True
