"""Typed records built from rows at the store's edge: nobody above the store reads ``row["col"]``.

Each record's fields are the columns its queries return, under the same names, so a
record's ``to_dict()`` is the row it was built from (the services still answer dicts).
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Self

from app.priorities import Route
from app.states import JobState

Row = Mapping[str, Any]


# Each record type's field names, read once: rows are built on the hot paths (claim, submit).
_NAMES: dict[type, tuple[str, ...]] = {}


def _names(cls: type) -> tuple[str, ...]:
    names = _NAMES.get(cls)
    if names is None:
        names = _NAMES[cls] = tuple(f.name for f in dataclasses.fields(cls))
    return names


class _Record:
    """What every record shares: built from a row by its field names, and back to a dict."""

    __slots__ = ()

    @classmethod
    def from_row(cls, row: Row) -> Self:
        """The record of a row; the row's other columns (a verdict, a join) are left."""
        return cls(**{name: row[name] for name in _names(cls)})

    def to_dict(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in _names(type(self))}


@dataclass(frozen=True, slots=True)
class Job(_Record):
    id: uuid.UUID
    tenant: str
    kind: str
    payload: Any
    state: JobState
    attempt: int
    max_attempts: int
    timeout_seconds: int
    idempotency_key: str | None
    request_hash: str
    result: Any
    last_error: str | None
    lease_owner: str | None
    lease_token: uuid.UUID | None
    lease_expires_at: dt.datetime | None
    cancel_requested: bool
    dead_lettered_by: str | None
    redrives: int
    runs: int  # starts of the kind's code, across attempts and redrives
    redriven_at: list[dt.datetime]  # redrives within the redrive window, oldest first
    created_at: dt.datetime
    updated_at: dt.datetime
    started_at: dt.datetime | None
    finished_at: dt.datetime | None
    parent_id: uuid.UUID | None  # the job that spawned this one
    spawn_key: str | None
    wait_kind: str | None  # while waiting: 'timer', 'callback' or 'children'
    wait_key: str | None
    wake_at: dt.datetime | None  # a timer's due time, a callback's deadline
    wait_rule: Any  # a gather's rule: children, need, all, tolerate
    wake_sent_at: dt.datetime | None
    trace_context: str | None  # the W3C traceparent the job's trace continues from
    parked: bool  # queued past its tenant's window on the queue: no message until released
    priority: str = "normal"  # high, normal or low: which queue its messages go to
    deadline: dt.datetime | None = None  # the whole run's: past it, the job ends (0022)
    rerun_of: uuid.UUID | None = None  # the finished job this one re-runs (0024)
    forked_from: uuid.UUID | None = None  # the job whose effects before fork_step it inherited
    fork_step: str | None = None
    kind_version: str | None = None  # the kind's version it first started on (0029)
    # Flow control by key (0030): the job's key, and its kind's limits per key.
    flow_key: str | None = None
    key_concurrency: int | None = None  # jobs of the key holding it at once, at most
    key_rate: int | None = None  # claims of the key's jobs per key_rate_seconds, at most
    key_rate_seconds: float | None = None

    @property
    def route(self) -> Route:
        """Where this job's messages go (its priority's queue, its tenant's group)."""
        return Route.of(self.id, self.tenant, self.priority)

    @classmethod
    def from_row(cls, row: Row) -> Self:
        job = super(Job, cls).from_row(row)
        # psycopg reads the job_state enum as text.
        return dataclasses.replace(job, state=JobState(row["state"]))

    def to_dict(self) -> dict[str, Any]:
        return {**super(Job, self).to_dict(), "state": self.state.value}


@dataclass(frozen=True, slots=True)
class JobEvent(_Record):
    id: int
    job_id: uuid.UUID
    at: dt.datetime
    from_state: str | None
    to_state: str
    attempt: int
    worker: str | None
    detail: str | None


@dataclass(frozen=True, slots=True)
class Effect(_Record):
    job_id: uuid.UUID
    key: str
    seq: int
    result: Any
    attempt: int
    worker: str | None
    recorded_at: dt.datetime
    inherited_from: uuid.UUID | None = None  # a fork's: the job that recorded it (0024)
    shape: str | None = None  # what kind of step recorded it (0029; NULL: before that)


@dataclass(frozen=True, slots=True)
class Admission(_Record):
    """The verdict insert_jobs returns on every row: whether it wrote, and why not."""

    key_ok: bool
    rate_ok: bool
    wait_seconds: float | None
    rate: float
    burst: int
    wanted: int
    flight_ok: bool
    max_in_flight: int
    conflict_ord: int | None
    # What it counted in full, for the next admission's bound (None: the last counts
    # bounded this one, so it did not count; store/admission.py).
    counted_recent: int | None
    counted_flight: int | None

    @classmethod
    def from_row(cls, row: Row) -> Self:
        verdict = super(Admission, cls).from_row(row)
        # extract(epoch ...) is numeric: psycopg reads it as a Decimal.
        wait = row["wait_seconds"]
        return dataclasses.replace(verdict, wait_seconds=None if wait is None else float(wait))


@dataclass(frozen=True, slots=True)
class OutboxRow(_Record):
    """A message still to send: the outbox row's id, the job it wakes up, the job's
    trace context (carried on the message; None where the query did not read it), and
    the job's tenant and priority (its route; None where the query did not read them:
    the send looks them up)."""

    id: int
    job_id: uuid.UUID
    trace_context: str | None = None
    tenant: str | None = None
    priority: str | None = None

    @property
    def route(self) -> Route | None:
        return None if self.tenant is None else Route.of(self.job_id, self.tenant, self.priority)

    @classmethod
    def from_row(cls, row: Row) -> Self:
        return cls(
            id=row["id"],
            job_id=row["job_id"],
            trace_context=row.get("trace_context"),
            tenant=row.get("tenant"),
            priority=row.get("priority"),
        )


@dataclass(frozen=True, slots=True)
class ApiKey(_Record):
    """A key as operators see it (never its secret)."""

    id: str
    tenant: str
    name: str
    admin: bool
    created_at: dt.datetime
    revoked_at: dt.datetime | None


@dataclass(frozen=True, slots=True)
class KeySecret(_Record):
    """What verifying a key needs: its hash and how it was made (``scheme``: 'scrypt'
    with a salt, or 'hmac-sha256' under the server secret ``hash_secret_id`` names), its
    tenant and scope, its revocation."""

    id: str
    tenant: str
    admin: bool
    scheme: str
    salt: bytes | None
    secret_hash: bytes
    hash_secret_id: str | None
    revoked_at: dt.datetime | None

    @classmethod
    def from_row(cls, row: Row) -> Self:
        secret = super(KeySecret, cls).from_row(row)
        # bytea arrives as bytes or memoryview depending on the loader.
        salt = row["salt"]
        return dataclasses.replace(
            secret,
            salt=None if salt is None else bytes(salt),
            secret_hash=bytes(row["secret_hash"]),
        )


@dataclass(frozen=True, slots=True)
class TenantLimits(_Record):
    """A tenant's overrides; None is the deployment's default."""

    tenant: str
    rate_per_second: float | None
    burst: int | None
    max_in_flight: int | None
    max_running: int | None


@dataclass(frozen=True, slots=True)
class TenantUsage(_Record):
    """A tenant that has a key or an override: its overrides, its unfinished jobs and
    those of them holding a live lease."""

    tenant: str
    rate_per_second: float | None
    burst: int | None
    max_in_flight: int | None
    max_running: int | None
    daily_tokens: int | None
    in_flight: int
    running: int
    parked: int


@dataclass(frozen=True, slots=True)
class Redriven(_Record):
    """A dead-lettered job put back to queued, with its outbox row when one was written;
    or, ``refused``, one left dead-lettered because its redrive budget is used up."""

    id: uuid.UUID
    outbox_id: int | None
    refused: bool


@dataclass(frozen=True, slots=True)
class Schedule(_Record):
    """A cron expression in a time zone that makes a job of ``kind`` at each slot."""

    id: uuid.UUID
    tenant: str
    name: str | None
    cron: str
    timezone: str
    kind: str
    payload: Any
    max_attempts: int | None
    timeout_seconds: int | None
    enabled: bool
    next_slot: dt.datetime | None  # the first slot not made yet; None: none left
    last_slot: dt.datetime | None
    last_job_id: uuid.UUID | None
    last_error: str | None
    created_at: dt.datetime
    updated_at: dt.datetime
