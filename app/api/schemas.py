"""The API's request and response bodies: what the OpenAPI document names and what a
route validates before any service runs. The bounds come from the services and from
AWS's limits, so the document and the code cannot disagree."""

from __future__ import annotations

import datetime as dt
import uuid
from typing import Any, Literal

from pydantic import AfterValidator, AwareDatetime, BaseModel, ConfigDict, Field, model_validator

from app import storable
from app.api.flow_schemas import KeyStatus
from app.priorities import Priority
from app.services import jobs
from app.services import submit as service
from app.settings import bounds
from app.states import JobState


def _storable(value: str | None) -> str | None:
    problem = storable.unstorable(value)
    if problem:
        raise ValueError(problem)
    return value


# Free text that reaches the database: a value it cannot store is a 422, not a 500.
Storable = AfterValidator(_storable)
# A tenant as keys and the database spell it (app/settings/bounds.py, anchored for JSON Schema).
TENANT_PATTERN = f"^(?:{bounds.TENANT_PATTERN})$"
# The bounds of a job's settings (app/settings/bounds.py), also named in 422 answers (errors.py).
MAX_ATTEMPTS = (bounds.MIN_ATTEMPTS, bounds.MAX_ATTEMPTS)
TIMEOUT_SECONDS = (bounds.MIN_TIMEOUT_SECONDS, bounds.MAX_TIMEOUT_SECONDS)


# --- jobs -------------------------------------------------------------------------


class JobCreate(BaseModel):
    model_config = ConfigDict(extra="forbid")

    kind: str = Field(min_length=1, max_length=100, examples=["support.triage"])
    payload: dict[str, Any] = Field(
        examples=[{"ticket_id": "T-1", "subject": "Refund", "body": "I was charged twice."}]
    )
    max_attempts: int | None = Field(None, ge=MAX_ATTEMPTS[0], le=MAX_ATTEMPTS[1])
    timeout_seconds: int | None = Field(None, ge=TIMEOUT_SECONDS[0], le=TIMEOUT_SECONDS[1])
    run_at: AwareDatetime | None = Field(
        None,
        description="run the job at this time (ISO 8601 with a time zone, at most a year "
        "ahead; a time past runs now). The job waits meanwhile (state waiting, on a timer).",
        examples=["2026-12-24T18:00:00Z"],
    )
    delay_seconds: float | None = Field(
        None,
        ge=0,
        le=bounds.MAX_DELAY_SECONDS,
        allow_inf_nan=False,
        description="run the job this many seconds from now (not with run_at)",
    )
    priority: Priority = Field(
        Priority.NORMAL,
        description="which queue its messages go to: high is served first, low gets what "
        "is left (each has its share, TASKLEASE_PRIORITY_WEIGHTS)",
    )
    deadline: AwareDatetime | None = Field(
        None,
        description="the whole run's deadline (ISO 8601 with a time zone, at most 366 days "
        'ahead): past it, whatever the job is doing, it ends dead_lettered, "deadline '
        "passed\", its children cancelled. Default: its kind's deadline_seconds, if any",
        examples=["2026-12-24T18:00:00Z"],
    )
    deadline_seconds: float | None = Field(
        None,
        gt=0,
        le=bounds.MAX_DEADLINE_SECONDS,
        allow_inf_nan=False,
        description="the whole run's deadline, this many seconds from now (not with deadline)",
    )

    key: str | None = Field(
        None,
        min_length=1,
        max_length=200,
        description="the job's key for flow control (docs/howto/flow-control.md): its kind's "
        "limits per key apply to the jobs of the key (same tenant and kind). Default: what "
        "the kind's key function makes of the payload, if it has one",
        examples=["conversation-42"],
    )
    if_active: Literal["enqueue", "reject", "cancel_active", "drop_new"] | None = Field(
        None,
        description="when a job of the key is active (not finished): enqueue (wait its "
        "turn), reject (409 naming it), cancel_active (cancel it, then run this one) or "
        "drop_new (write nothing; the answer is the active job, 200). Default: the kind's",
    )

    @model_validator(mode="after")
    def _one_time(self) -> JobCreate:
        if self.run_at is not None and self.delay_seconds is not None:
            raise ValueError("give run_at or delay_seconds, not both")
        if self.deadline is not None and self.deadline_seconds is not None:
            raise ValueError("give deadline or deadline_seconds, not both")
        return self


class JobBatchItem(JobCreate):
    idempotency_key: str | None = Field(
        None,
        min_length=1,
        max_length=service.MAX_IDEMPOTENCY_KEY,
        description="this job's Idempotency-Key (the header's role for POST /v1/jobs)",
    )

    def new_job(self) -> service.NewJob:
        return service.NewJob(
            kind=self.kind,
            payload=self.payload,
            max_attempts=self.max_attempts,
            timeout_seconds=self.timeout_seconds,
            idempotency_key=self.idempotency_key,
            run_at=self.run_at,
            delay_seconds=self.delay_seconds,
            priority=self.priority.value,
            deadline=self.deadline,
            deadline_seconds=self.deadline_seconds,
            key=self.key,
            if_active=self.if_active,
        )


class JobBatchCreate(BaseModel):
    model_config = ConfigDict(extra="forbid")

    jobs: list[JobBatchItem] = Field(min_length=1, max_length=service.MAX_SUBMIT_BATCH)


class WaitRule(BaseModel):
    need: int | None = Field(description="children that must succeed (None: all)")
    all: bool
    tolerate: int | None = Field(description="failed children the gather tolerates")
    count: int = Field(description="children gathered")


class WaitingFor(BaseModel):
    kind: Literal["timer", "callback", "children", "message"]
    key: str | None = Field(
        description="the wait's key in the kind's code ('run_at' for a delayed submission; "
        "a message's topic)"
    )
    until: dt.datetime | None = Field(
        description="a timer's due time, a callback's or a receive's deadline (none for "
        "children, nor for a receive without a timeout)"
    )
    rule: WaitRule | None = Field(description="children only: the gather's rule")


class JobPublic(BaseModel):
    id: uuid.UUID
    tenant: str = Field(description="the tenant of the key that created the job")
    kind: str
    priority: Priority = Field(description="high, normal or low: the queue it is served from")
    state: JobState
    parked: bool = Field(
        description="queued past its tenant's window on the queue: no message yet, sent "
        "when one of the tenant's leases ends"
    )
    attempt: int = Field(
        description="attempts used of max_attempts: each lease uses one, given back when "
        "the run ends waiting, handed back or throttled (waits use none; runs counts every "
        "start of the code)"
    )
    max_attempts: int
    timeout_seconds: int
    payload: dict[str, Any]
    result: Any | None
    last_error: str | None
    lease_owner: str | None = Field(
        description="the worker holding the job's lease; null when no live lease holds it "
        "(not leased or running, or its lease expired)"
    )
    lease_expires_at: dt.datetime | None
    redrives: int = Field(
        description="how many times the job was redriven out of dead_lettered, in all"
    )
    runs: int = Field(
        description="how many times the kind's code started, across attempts and redrives"
    )
    cancel_requested: bool
    dead_lettered_by: str | None
    created_at: dt.datetime
    updated_at: dt.datetime
    started_at: dt.datetime | None
    finished_at: dt.datetime | None
    parent_id: uuid.UUID | None = Field(description="the job that spawned this one")
    waiting_for: WaitingFor | None = Field(description="while waiting: what for, until when")
    deadline: dt.datetime | None = Field(
        None,
        description="the whole run's deadline: past it the job ends dead_lettered "
        '(dead_lettered_by deadline, "deadline passed"); null: none',
    )
    rerun_of: uuid.UUID | None = Field(None, description="the finished job this one re-runs")
    forked_from: uuid.UUID | None = Field(
        None, description="the job this one was forked from (it inherited its earlier steps)"
    )
    fork_step: str | None = Field(None, description="a fork's: the step it runs from")
    kind_version: str | None = Field(
        None,
        description="the version of its kind the job first started on (@kind version=); "
        "null: not started yet, or started before versions were recorded",
    )
    key: str | None = Field(
        None,
        description="the job's key for flow control (its kind's limits per key apply); null: none",
    )

    @classmethod
    def of(cls, row: dict[str, Any]) -> JobPublic:
        return cls.model_validate(cls.fields_of(row))

    @classmethod
    def fields_of(cls, row: dict[str, Any]) -> dict[str, Any]:
        return {
            **{k: row[k] for k in JobPublic.model_fields if k not in ("waiting_for", "key")},
            "key": row.get("flow_key"),
            "lease_owner": jobs.lease_holder(row),
            "waiting_for": jobs.waiting_for(row),
        }


class ChildPublic(BaseModel):
    id: uuid.UUID
    kind: str
    state: JobState
    created_at: dt.datetime
    finished_at: dt.datetime | None


class RerunPublic(ChildPublic):
    """A job re-run (``rerun_of``) or forked (``forked_from``, from ``fork_step``) from another."""

    rerun_of: uuid.UUID | None
    forked_from: uuid.UUID | None
    fork_step: str | None


class ModelUsage(BaseModel):
    model: str
    calls: int
    input_tokens: int
    output_tokens: int
    cost_usd: float | None = Field(description="estimated; null for a model without a price")


class JobUsage(BaseModel):
    """The tokens a job's model calls reported and their estimated cost (TASKLEASE_MODEL_PRICES)."""

    input_tokens: int
    output_tokens: int
    cost_usd: float | None = Field(description="estimated; null when a model has no price")
    models: list[ModelUsage]


class JobDetail(JobPublic):
    children: list[ChildPublic] = Field(
        description=f"the jobs it spawned, oldest first (the first {jobs.MAX_CHILDREN_SHOWN})"
    )
    children_count: int = Field(description="how many jobs it spawned, in all")
    usage: JobUsage | None = Field(None, description="its model calls' tokens and cost")
    reruns: list[RerunPublic] = Field(
        [], description="the jobs re-run or forked from it, oldest first (the first 100)"
    )
    key_status: KeyStatus | None = Field(
        None, description="a keyed job: its key's limits and jobs, and whether it waits for them"
    )

    @classmethod
    def with_children(
        cls,
        row: dict[str, Any],
        children: list[dict[str, Any]],
        count: int,
        usage: dict[str, Any] | None = None,
        reruns: list[dict[str, Any]] | None = None,
        key_status: dict[str, Any] | None = None,
    ) -> JobDetail:
        return cls.model_validate(
            {
                **cls.fields_of(row),
                "children": [{k: c[k] for k in ChildPublic.model_fields} for c in children],
                "children_count": count,
                "usage": usage,
                "reruns": [{k: r[k] for k in RerunPublic.model_fields} for r in reruns or []],
                "key_status": key_status,
            }
        )


class JobBatchPublic(BaseModel):
    jobs: list[JobPublic] = Field(description="one per job asked for, in the same order")
    replayed: list[int] = Field(
        description="the positions answered by the job an earlier request made with the "
        "same idempotency_key"
    )
    dropped: list[int] = Field(
        default_factory=list,
        description="the positions answered by their key's active job, nothing written "
        "(if_active drop_new: docs/howto/flow-control.md)",
    )


class JobPage(BaseModel):
    items: list[JobPublic]
    next_cursor: str | None


class EventPublic(BaseModel):
    at: dt.datetime
    from_state: JobState | None
    to_state: JobState
    attempt: int
    worker: str | None
    detail: str | None


class EffectPublic(BaseModel):
    key: str
    seq: int
    attempt: int
    worker: str | None
    recorded_at: dt.datetime
    inherited_from: uuid.UUID | None = Field(
        None,
        description="a fork's inherited step: the job that recorded it (attempt, worker and "
        "recorded_at are that job's; this job did not run it)",
    )
    shape: str | None = Field(
        None,
        description="what kind of step recorded it (effect, model_call, sleep, callback, "
        "notify, spawn <kind>, gather, receive, patch; ' within <key>' inside another "
        "step): checked when the job's code reaches it again; null: recorded before "
        "shapes were",
    )
    result: Any  # last: the one field of any size


# --- the caller and the service -------------------------------------------------


class Me(BaseModel):
    tenant: str
    admin: bool
    key_id: str | None
    via: str


class Readiness(BaseModel):
    status: Literal["ready", "not ready"]
    database: str = Field(description='"ok", or why it is unreachable')
    queue: str = Field(description='"ok", or why it is unreachable')


class Problem(BaseModel):
    detail: str
