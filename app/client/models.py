"""The API's bodies as the client reads and sends them. Each model mirrors a component
schema of the API's OpenAPI document (named in its docstring);
tests/unit/test_client_models.py checks that they agree, so a drift fails a test.

Unknown fields are ignored: an API newer than the client still parses."""

from __future__ import annotations

import datetime as dt
import enum
import uuid
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field


class JobState(enum.StrEnum):
    QUEUED = "queued"
    LEASED = "leased"
    RUNNING = "running"
    RETRYING = "retrying"
    STALLED = "stalled"
    WAITING = "waiting"
    SUCCEEDED = "succeeded"
    DEAD_LETTERED = "dead_lettered"
    CANCELLED = "cancelled"

    @property
    def finished(self) -> bool:
        """Nothing more happens to the job unless somebody acts (redrives a dead letter)."""
        return self in FINISHED


FINISHED = frozenset({JobState.SUCCEEDED, JobState.DEAD_LETTERED, JobState.CANCELLED})


class Priority(enum.StrEnum):
    """Which queue a job is served from: high first, low with what is left."""

    HIGH = "high"
    NORMAL = "normal"
    LOW = "low"


# What a new job of a key does while one of the key's jobs is active.
IfActive = Literal["enqueue", "reject", "cancel_active", "drop_new"]


class _Model(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)


class KindRate(_Model):
    """RatePublic: at most ``limit`` of a key's jobs start in any ``per_seconds``."""

    limit: int
    per_seconds: float


class KindFlow(_Model):
    """FlowPublic: a kind's limits per key."""

    keyed: bool
    concurrency: int | None
    if_active: IfActive
    debounce_seconds: float | None
    rate: KindRate | None


class KindInfo(_Model):
    """KindPublic: a job kind the deployment runs (GET /v1/kinds)."""

    name: str
    description: str
    timeout_seconds: int
    max_attempts: int
    payload_schema: dict[str, Any]
    result_schema: dict[str, Any]
    # Its jobs by state (the key's tenant's; an admin key's every tenant's); empty from an
    # API older than the counts.
    counts: dict[str, int] = Field(default_factory=dict)
    # The version new jobs start on, every version served, and the policy (an API older
    # than kind versions: "1", ["1"], "resume").
    version: str = "1"
    versions: list[str] = Field(default_factory=lambda: ["1"])
    on_version_change: str = "resume"
    # Its flow control by key (docs/howto/flow-control.md); an API older than keys: none.
    flow: KindFlow | None = None


class WorkerInfo(_Model):
    """WorkerPublic: a worker process or a Lambda environment (GET /v1/workers, admin)."""

    id: str
    name: str
    runtime: Literal["process", "lambda"]
    status: Literal["alive", "gone", "stopped", "idle"]
    host: str
    pid: int
    carrier: str
    version: str
    started_at: dt.datetime
    last_seen: dt.datetime
    seen_seconds_ago: float
    running: int
    invocations: int
    messages: int
    stopped_at: dt.datetime | None


class WaitRule(_Model):
    """WaitRule: a gather's rule."""

    need: int | None
    all: bool
    tolerate: int | None
    count: int


class WaitingFor(_Model):
    """WaitingFor: what a waiting job waits for."""

    kind: Literal["timer", "callback", "children", "message"]
    key: str | None
    until: dt.datetime | None
    rule: WaitRule | None


class Job(_Model):
    """JobPublic."""

    id: uuid.UUID
    tenant: str
    kind: str
    priority: Priority
    state: JobState
    parked: bool
    attempt: int
    max_attempts: int
    timeout_seconds: int
    payload: dict[str, Any]
    result: Any | None
    last_error: str | None
    lease_owner: str | None
    lease_expires_at: dt.datetime | None
    redrives: int
    runs: int
    cancel_requested: bool
    dead_lettered_by: str | None
    created_at: dt.datetime
    updated_at: dt.datetime
    started_at: dt.datetime | None
    finished_at: dt.datetime | None
    parent_id: uuid.UUID | None
    waiting_for: WaitingFor | None
    deadline: dt.datetime | None = None  # the whole run's: past it, it ends dead-lettered
    rerun_of: uuid.UUID | None = None  # the finished job this one re-runs
    forked_from: uuid.UUID | None = None  # the job whose steps before fork_step it inherited
    fork_step: str | None = None
    kind_version: str | None = None  # the kind's version it first started on (None: not yet)
    key: str | None = None  # its flow-control key (docs/howto/flow-control.md); None: none

    @property
    def finished(self) -> bool:
        return self.state.finished


class Submitted(Job):
    """What ``submit`` and ``submit_many`` answer: the job, and how the API answered.
    ``replayed``: an earlier request with the same idempotency key made it (nothing new);
    ``dropped``: its key's active job, answered instead of a new one, nothing written
    (the kind's or the submission's ``if_active="drop_new"``)."""

    replayed: bool = False
    dropped: bool = False


class Child(_Model):
    """ChildPublic: a job a job spawned."""

    id: uuid.UUID
    kind: str
    state: JobState
    created_at: dt.datetime
    finished_at: dt.datetime | None


class Rerun(Child):
    """RerunPublic: a job re-run or forked from another."""

    rerun_of: uuid.UUID | None
    forked_from: uuid.UUID | None
    fork_step: str | None


class Fork(Job):
    """ForkPublic: a fork, with the steps it inherited (in order)."""

    inherited: list[str]


class ModelUsage(_Model):
    """ModelUsage: one model's calls, tokens and estimated cost in a job."""

    model: str
    calls: int
    input_tokens: int
    output_tokens: int
    cost_usd: float | None


class JobUsage(_Model):
    """JobUsage: the tokens a job's model calls reported and their estimated cost."""

    input_tokens: int
    output_tokens: int
    cost_usd: float | None
    models: list[ModelUsage]


class KeyStatus(_Model):
    """KeyStatus: where a keyed job stands on its key, and whether it waits for it."""

    key: str
    concurrency: int | None
    rate: KindRate | None
    holding: int  # the key's other jobs holding it
    queued_ahead: int  # the key's jobs queued before this one
    open: int  # the key's jobs not finished, this one included
    waits_for_key: bool
    waits_for_rate: bool


class JobDetail(Job):
    """JobDetail: the job with its children and its model usage."""

    children: list[Child]
    children_count: int
    usage: JobUsage | None = None
    reruns: list[Rerun] = []  # the jobs re-run or forked from it (the first 100)
    key_status: KeyStatus | None = None  # a keyed job's standing on its key


class JobRequest(_Model):
    """JobBatchItem: one job of ``submit_many`` (``submit``'s arguments as a model)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    kind: str
    payload: dict[str, Any]
    max_attempts: int | None = None
    timeout_seconds: int | None = None
    run_at: dt.datetime | None = None
    delay_seconds: float | None = None
    priority: Priority = Priority.NORMAL
    idempotency_key: str | None = None
    deadline: dt.datetime | None = None
    deadline_seconds: float | None = None
    key: str | None = None  # its flow-control key (default: its kind's, from the payload)
    if_active: IfActive | None = None  # default: its kind's


class JobBatch(_Model):
    """JobBatchPublic: the jobs of a batch, in order, which were replayed and which were
    answered by their key's active job (dropped)."""

    jobs: list[Job]
    replayed: list[int]
    dropped: list[int] = Field(default_factory=list)  # an API older than keys: none

    def submitted(self) -> list[Submitted]:
        """Each job with how it was answered."""
        replayed, dropped = set(self.replayed), set(self.dropped)
        return [
            Submitted.model_validate(
                {**job.model_dump(), "replayed": i in replayed, "dropped": i in dropped}
            )
            for i, job in enumerate(self.jobs)
        ]


class StreamEvent(_Model):
    """StreamEventPublic: one event of a job's stream. ``data`` by ``type``:
    transition: from_state, to_state, worker, detail; progress: fraction, note;
    output: what the kind emitted; chunk: key, seq, text; state: key, value, version."""

    id: str
    type: Literal["transition", "progress", "output", "chunk", "state"]
    job_id: uuid.UUID
    tenant: str
    kind: str
    at: dt.datetime
    attempt: int
    data: Any


class StreamPage(_Model):
    """StreamPage: a long poll's answer."""

    events: list[StreamEvent]
    next: str
    done: bool


class Message(_Model):
    """MessagePublic: a message to a job; ``consumed_at`` is when a receive of the job
    read it (None: unread)."""

    id: int
    job_id: uuid.UUID
    topic: str
    body: Any
    sent_at: dt.datetime
    consumed_at: dt.datetime | None


class MessageSent(Message):
    """MessageSent: the message stored (or, on a replay of its Idempotency-Key, the one
    stored before); ``job_woken`` whether it woke the job."""

    job_woken: bool


class StateValue(_Model):
    """StatePublic: one key a job published (``ctx.set_state``); ``version`` counts its
    changes (1: its first value), ``attempt`` is the attempt that set it."""

    key: str
    version: int
    attempt: int
    updated_at: dt.datetime
    value: Any


class StatePage(_Model):
    """StatePage: every key a job published."""

    items: list[StateValue]


class CallbackAnswered(_Model):
    """CallbackAnswered: ``callback_state`` is the callback's state (not the job's), and
    ``job_woken`` whether the answer woke the job. ``state`` and ``woken`` are their
    deprecated old names (reading them warns)."""

    job_id: uuid.UUID
    key: str
    callback_state: Literal["succeeded", "failed"]
    job_woken: bool
    state: Literal["succeeded", "failed"] = Field(
        deprecated="CallbackAnswered.state is deprecated: read callback_state"
    )
    woken: bool = Field(deprecated="CallbackAnswered.woken is deprecated: read job_woken")


class CallbackHeartbeat(_Model):
    """CallbackHeartbeat: the callback's new deadline."""

    deadline: dt.datetime
