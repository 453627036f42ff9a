"""Re-run and fork a finished job (docs/explain/design.md#re-run-and-fork).

A re-run is a new job of the same kind with the original's payload (or an edited one),
``rerun_of`` the original. A fork is a new job that inherits the effects the original
recorded before a named step (the effects' order: seq, recorded_at, key) and runs from
there: the insert copies those effect rows into the new job in the statement that
creates it, each marked ``inherited_from``, so a replay returns them without running
their code again (a model call is not paid for twice), and a prune of either job leaves
the other whole.

Both go through the submit path (app/services/submit.py): validated against the kind's
payload schema, admitted against the original tenant's limits (rate, unfinished jobs,
its window on the queue), written with their outbox row and sent. The new job's first
event names its origin and who asked for it. Only finished jobs (succeeded,
dead_lettered, cancelled) are re-run or forked; a tenant key reaches only its tenant's.

A fork never inherits a step tied to rows of the original's own (a child it spawned, a
gather of its children, a callback and its notify): the new job has no such rows, so
replaying the step would point it at another job's children or an unanswerable
callback. Such a fork is refused (409) naming the step; fork from it or before it.
Streams, chunks, published state and messages of the original are not copied.
"""

from __future__ import annotations

import enum
import logging
import uuid
from dataclasses import dataclass
from typing import Any

from app import errors, store
from app.kinds.waiting import CALLBACK, GATHER, NOTIFY, SPAWN
from app.services import jobs, outbox, submit
from app.services.submit import Submitted
from app.settings.config import Settings
from app.states import FINAL_FOR_NOW
from app.store.records import Job
from app.transport import Transport

log = logging.getLogger(__name__)

# Steps a fork may not inherit: they tie the job to its own children or callbacks.
UNFORKABLE = (SPAWN, GATHER, CALLBACK, NOTIFY)
# How many re-runs and forks of a job its page lists.
MAX_RERUNS_SHOWN = 100


class Unset(enum.Enum):
    UNSET = "unset"


UNSET = Unset.UNSET  # no payload given: the original's


@dataclass(frozen=True)
class Forked:
    submitted: Submitted
    inherited: list[str]  # the steps copied into the new job, in order


async def _finished(db: store.Database, job_id: uuid.UUID, scope: str | None, what: str) -> Job:
    """The job if the caller may see it and it is finished; else NotFound or Conflict."""
    job = await jobs.find(db, job_id, scope=scope)
    if job.state not in FINAL_FOR_NOW:  # dead_lettered included: its redrive is another
        raise errors.Conflict(
            f"job {job_id} is {job.state}: only a finished job (succeeded, dead_lettered, "
            f"cancelled) can be {what}"
        )
    return job


def _like(job: Job, payload: Any, note: str, **origin: Any) -> submit.NewJob:
    """A new job of the original's kind, attempts, timeout and priority (not its deadline,
    a time that has passed: the kind's default applies)."""
    return submit.NewJob(
        kind=job.kind,
        payload=job.payload if payload is UNSET else payload,
        max_attempts=job.max_attempts,
        timeout_seconds=job.timeout_seconds,
        priority=job.priority,
        note=note,
        **origin,
    )


def _edited(job: Job, payload: Any) -> str:
    """What the first event says of the payload: edited, or not (the same one sent back,
    as the web view's editor does, is not an edit)."""
    return "" if payload is UNSET or payload == job.payload else " with an edited payload"


def _by(by: str | None) -> str:
    return f" by {by}" if by else ""


async def _made_before(
    db: store.Database,
    job_id: uuid.UUID,
    key: str | None,
    scope: str | None,
    payload: Any,
    **origin: Any,
) -> Submitted | None:
    """A retry's answer: the re-run or fork of ``job_id`` an earlier request made under
    the Idempotency-Key ``key``, asked for the same way (``origin``: rerun_of, or
    forked_from and fork_step; the same payload), whatever became of the original since
    (redriven, pruned). None: none, or one asked for otherwise, which the submit path
    answers (a 409 naming the key)."""
    if key is None:
        return None
    made = await store.jobs.made_from(db, job_id, key, scope)
    if made is None or any(getattr(made, k) != v for k, v in origin.items()):
        return None
    if payload is not UNSET and payload != made.payload:
        return None
    return Submitted(job=made.to_dict(), created=False)


async def rerun(
    settings: Settings,
    db: store.Database,
    queue: Transport,
    job_id: uuid.UUID,
    *,
    scope: str | None,
    payload: Any = UNSET,
    sender: outbox.OutboxSender | None = None,
    key_id: str | None = None,
    by: str | None = None,
    idempotency_key: str | None = None,
) -> Submitted:
    """Re-run a finished job as a new job (``rerun_of`` it) in the original's tenant, with
    its payload or ``payload``. ``scope``: the caller's tenant, None for an admin;
    ``key_id``: the caller's key (its revocation is checked by the insert); ``by``: who
    asks, for the new job's first event; ``idempotency_key``: as a submit's (a bulk
    re-run's batch run again after a crash finds the re-runs it made)."""
    again = await _made_before(db, job_id, idempotency_key, scope, payload, rerun_of=job_id)
    if again is not None:
        return again
    original = await _finished(db, job_id, scope, "re-run")
    edited = _edited(original, payload)
    note = f"re-run of {job_id}{edited}{_by(by)}"
    new = _like(original, payload, note, rerun_of=job_id, idempotency_key=idempotency_key)
    (made,) = await submit.submit_many(
        settings, db, queue, [new], tenant=original.tenant, sender=sender, key_id=key_id
    )
    log.info(
        "job re-run",
        extra={"job_id": made.job["id"], "rerun_of": job_id, "by": by, "edited": bool(edited)},
    )
    return made


async def fork(
    settings: Settings,
    db: store.Database,
    queue: Transport,
    job_id: uuid.UUID,
    *,
    step: str | None,
    scope: str | None,
    payload: Any = UNSET,
    sender: outbox.OutboxSender | None = None,
    key_id: str | None = None,
    by: str | None = None,
    idempotency_key: str | None = None,
) -> Forked:
    """Fork a finished job from ``step`` (an effect key it recorded): a new job that
    inherits the effects recorded before it and runs from there; ``step`` None: every
    effect it recorded, so the new job runs from the step after its last recorded one
    (the step a dead letter failed in, which recorded nothing). NotFound naming the step
    when the job did not record it; Conflict when the fork would inherit a step tied to
    the original's children or callbacks. ``idempotency_key``: as a submit's, bound to
    the original and the step too."""
    again = await _made_before(
        db, job_id, idempotency_key, scope, payload, forked_from=job_id, fork_step=step
    )
    if again is not None:
        copied = await store.effects.of_job(db, uuid.UUID(str(again.job["id"])))
        return Forked(again, [e.key for e in copied if e.inherited_from is not None])
    original = await _finished(db, job_id, scope, "forked")
    keys = [e.key for e in await store.effects.of_job(db, job_id)]
    if step is not None and step not in keys:
        known = ", ".join(repr(k) for k in keys[:20]) + (", ..." if len(keys) > 20 else "")
        raise errors.NotFound(
            f"job {job_id} recorded no step {step!r}"
            + (f"; its steps: {known}" if keys else "; it recorded none")
        )
    inherited = keys if step is None else keys[: keys.index(step)]
    tied = next((k for k in inherited if k.startswith(UNFORKABLE)), None)
    if tied is not None:
        raise errors.Conflict(
            f"cannot fork job {job_id} {'after its last step' if step is None else f'from {step!r}'}"
            f": the fork would inherit {tied!r}, a step "
            "tied to the original's own children or callbacks; fork from that step or an "
            "earlier one"
        )
    n = len(inherited)
    where = "after its last recorded step" if step is None else f"at step {step!r}"
    note = f"forked from {job_id} {where} ({n} step{'' if n == 1 else 's'} inherited)"
    note += _edited(original, payload)
    new = _like(
        original,
        payload,
        note + _by(by),
        forked_from=job_id,
        fork_step=step,
        idempotency_key=idempotency_key,
    )
    (made,) = await submit.submit_many(
        settings, db, queue, [new], tenant=original.tenant, sender=sender, key_id=key_id
    )
    log.info(
        "job forked",
        extra={"job_id": made.job["id"], "forked_from": job_id, "step": step, "by": by},
    )
    return Forked(made, inherited)


async def reruns_of(
    db: store.Database, job_id: uuid.UUID, *, scope: str | None
) -> list[dict[str, Any]]:
    """The jobs re-run or forked from this one, oldest first (the first 100)."""
    await jobs.find(db, job_id, scope=scope)
    found = await store.jobs.reruns_of(db, job_id, limit=MAX_RERUNS_SHOWN)
    return [job.to_dict() for job in found]
