"""A job as a caller asks for it (``NewJob``), checked and made ready for the insert
(``validated``): kind, payload, bounds, Idempotency-Key, timing, priority, deadline and
flow-control key, and the request hash its Idempotency-Key is bound to. The submit path
(``app.services.submit``), a spawned child and a schedule's slot go through here."""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import math
import uuid
from dataclasses import dataclass
from typing import Any

from app import errors, kinds
from app.kinds import flow as flow_control
from app.priorities import Priority
from app.services import deadlines
from app.settings import bounds
from app.settings.config import Settings
from app.storable import unstorable
from app.store.jobs import NewRow

MAX_IDEMPOTENCY_KEY = bounds.MAX_IDEMPOTENCY_KEY_CHARS


@dataclass(frozen=True)
class NewJob:
    """One job as a caller asks for it."""

    kind: str
    payload: Any
    max_attempts: int | None = None
    timeout_seconds: int | None = None
    idempotency_key: str | None = None
    run_at: dt.datetime | None = None  # with a time zone; at most a year ahead
    delay_seconds: float | None = None  # 0 to a year; not both
    priority: str | None = None  # high, normal or low (None: normal)
    deadline: dt.datetime | None = None  # the whole run's (services/deadlines.py)
    deadline_seconds: float | None = None  # from its submission; not both
    # A re-run's or a fork's origin (app/services/reruns.py); a note for its first event.
    rerun_of: uuid.UUID | None = None
    forked_from: uuid.UUID | None = None
    fork_step: str | None = None
    note: str | None = None
    # Flow control (app/kinds/flow.py): the job's key (else its kind's key function's),
    # and what to do when a job of the key is active (else its kind's if_active).
    key: str | None = None
    if_active: str | None = None


def request_hash(
    kind: str,
    payload: Any,
    max_attempts: int,
    timeout_seconds: int,
    *,
    run_at: dt.datetime | None = None,
    delay_seconds: float | None = None,
    priority: str | None = None,
    deadline: str | float | None = None,
    origin: dict[str, str] | None = None,
    flow: dict[str, str] | None = None,
) -> str:
    """What an Idempotency-Key is bound to. When the job should run, and a priority other
    than normal, are part of the request (the same key asking for another time or
    priority is a 409), added only when asked for, so the hashes of requests without them
    are the ones stored before they existed."""
    request: dict[str, Any] = {
        "kind": kind,
        "payload": payload,
        "max_attempts": max_attempts,
        "timeout": timeout_seconds,
    }
    if run_at is not None:
        request["run_at"] = run_at.astimezone(dt.UTC).isoformat()
    if delay_seconds is not None:
        request["delay_seconds"] = delay_seconds
    if priority not in (None, Priority.NORMAL):
        request["priority"] = priority
    if deadline is not None:
        request["deadline"] = deadline
    if origin:  # a re-run's or a fork's: the same key for another job's re-run is a 409
        request["origin"] = origin
    if flow:  # a key or an if_active the submission gave
        request["flow"] = flow
    canonical = json.dumps(request, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()


def _origin(new: NewJob) -> dict[str, str] | None:
    """A re-run's or a fork's origin, as its Idempotency-Key is bound to it."""
    origin = {
        "rerun_of": new.rerun_of,
        "forked_from": new.forked_from,
        "fork_step": new.fork_step if new.forked_from is not None else None,
    }
    return {k: str(v) for k, v in origin.items() if v is not None} or None


def _check_timing(new: NewJob) -> None:
    """run_at or delay_seconds, not both, within a year; run_at with its time zone."""
    if new.run_at is not None and new.delay_seconds is not None:
        raise errors.BadRequest("give run_at or delay_seconds, not both")
    if new.delay_seconds is not None and not (
        math.isfinite(new.delay_seconds) and 0 <= new.delay_seconds <= bounds.MAX_DELAY_SECONDS
    ):
        raise errors.BadRequest(
            f"delay_seconds must be between 0 and {bounds.MAX_DELAY_SECONDS} (a year)"
        )
    if new.run_at is not None:
        if new.run_at.tzinfo is None or new.run_at.utcoffset() is None:
            raise errors.BadRequest(
                "run_at needs a time zone (ISO 8601 with Z or an offset, e.g. "
                "2026-12-24T18:00:00+01:00)"
            )
        latest = dt.datetime.now(dt.UTC) + dt.timedelta(seconds=bounds.MAX_DELAY_SECONDS)
        if new.run_at > latest:
            raise errors.BadRequest("run_at must be at most a year from now")


def _priority(value: str | None) -> Priority:
    try:
        return Priority(value or Priority.NORMAL)
    except ValueError:
        raise errors.BadRequest(
            f"priority must be one of high, normal, low, not {value!r}"
        ) from None


def validated(settings: Settings, new: NewJob) -> NewRow:
    """The job checked (kind, payload, bounds, key, timing, priority) and ready for the
    insert, or BadRequest naming what is wrong; a spawned child and a schedule's job go
    through here too."""
    _check_timing(new)
    priority = _priority(new.priority)
    k = kinds.get(new.kind)
    deadline, deadline_seconds = deadlines.checked(
        new.deadline, new.deadline_seconds, k.deadline_seconds
    )
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
    if not bounds.MIN_TIMEOUT_SECONDS <= timeout <= bounds.MAX_TIMEOUT_SECONDS:
        raise errors.BadRequest(
            f"timeout_seconds must be between {bounds.MIN_TIMEOUT_SECONDS} and "
            f"{bounds.MAX_TIMEOUT_SECONDS}"
        )
    key = new.idempotency_key
    if key is not None and not 1 <= len(key) <= MAX_IDEMPOTENCY_KEY:
        raise errors.BadRequest(f"Idempotency-Key must be 1 to {MAX_IDEMPOTENCY_KEY} characters")
    stored_payload = parsed.model_dump(mode="json", exclude_unset=True)
    flow_key = flow_control.key_of(k.name, k.flow, parsed, new.key)
    if_active = new.if_active or k.flow.if_active
    if if_active not in flow_control.IF_ACTIVE:
        raise errors.BadRequest(
            f"if_active must be one of {', '.join(flow_control.IF_ACTIVE)}, not {if_active!r}"
        )
    if new.if_active is not None and flow_key is None:
        raise errors.BadRequest(
            "if_active needs a key: give key, or submit a kind whose key function gives one"
        )
    debounce = k.flow.debounce_seconds if flow_key is not None else None
    if debounce is not None and (new.run_at is not None or new.delay_seconds is not None):
        raise errors.BadRequest(
            f"kind {k.name!r} debounces its jobs ({debounce:g} s after the last of a key's "
            "burst): give neither run_at nor delay_seconds"
        )
    concurrency = k.flow.concurrency
    if concurrency is None and if_active != "enqueue":
        concurrency = 1  # as the kind's own policy implies (app/kinds/flow.py)
    given = {"key": new.key, "if_active": new.if_active}
    digest = request_hash(
        new.kind,
        stored_payload,
        attempts,
        timeout,
        run_at=new.run_at,
        delay_seconds=new.delay_seconds,
        priority=priority,
        deadline=deadlines.hashed(new.deadline, new.deadline_seconds),
        origin=_origin(new),
        flow={name: value for name, value in given.items() if value is not None} or None,
    )
    rate = k.flow.rate if flow_key is not None else None
    return NewRow(
        uuid.uuid4(),
        new.kind,
        stored_payload,
        attempts,
        timeout,
        key,
        digest,
        run_at=new.run_at,
        delay_seconds=new.delay_seconds,
        priority=priority.value,
        deadline=deadline,
        deadline_seconds=deadline_seconds,
        rerun_of=new.rerun_of,
        forked_from=new.forked_from,
        fork_step=new.fork_step,
        note=new.note,
        flow_key=flow_key,
        key_concurrency=concurrency if flow_key is not None else None,
        key_rate=rate.limit if rate is not None else None,
        key_rate_seconds=rate.per_seconds if rate is not None else None,
        debounce_seconds=debounce,
        if_active=if_active if flow_key is not None else "enqueue",
    )
