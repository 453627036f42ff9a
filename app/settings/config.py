"""One typed settings object, read from ``TASKLEASE_*`` and the standard AWS variables.

Bad configuration fails at start-up with a message that names the variable and
the allowed range. The SQS endpoint is not a tasklease setting: boto3 reads
``AWS_ENDPOINT_URL_SQS`` (or ``AWS_ENDPOINT_URL``) itself, so the same code
talks to AWS, LocalStack or moto's server.
"""

from __future__ import annotations

import os
import urllib.parse
from typing import Any, Literal, Self, TypeVar

from pydantic import (
    Field,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic_settings import BaseSettings, SettingsConfigDict

from app import errors, priorities
from app.priorities import Priority
from app.settings import aws_limits as limits
from app.settings import bounds
from app.settings import queues as queue_settings
from app.settings.access import AccessSettings
from app.settings.alerts import AlertSettings
from app.settings.models import ModelCallSettings
from app.settings.queues import PRIORITY_QUEUE_FIELDS
from app.settings.retention import RetentionSettings

# Settings shared with infra/*.tf (visibility and the function timeout differ on purpose:
# the local defaults suit one machine, the file's suit Lambda).
from app.settings.shared import SHARED
from app.settings.worker import WorkerSettings

PREFIX = "TASKLEASE_"
S = TypeVar("S", bound=BaseSettings)


class Settings(
    AccessSettings,
    ModelCallSettings,
    WorkerSettings,
    RetentionSettings,
    AlertSettings,
    BaseSettings,
):
    model_config = SettingsConfigDict(env_prefix=PREFIX, extra="ignore", frozen=True)

    # Endpoints. Optional here; each command asks for the ones it needs with need().
    database_url: str | None = Field(
        None,
        description="the PostgreSQL URL (postgresql://user:password@host:port/name); or, on AWS, the secret and host below",
    )
    # On AWS: the RDS-managed secret ({"username", "password"}) and where the server is.
    database_secret_arn: str | None = Field(
        None,
        description='on AWS: the RDS-managed secret ({"username", "password"}) to build the database URL from, with TASKLEASE_DATABASE_HOST and TASKLEASE_DATABASE_NAME',
    )
    database_host: str | None = Field(
        None, description="the database server's host name, with TASKLEASE_DATABASE_SECRET_ARN"
    )
    database_port: int = Field(
        5432,
        ge=1,
        le=65535,
        description="the database server's port, with TASKLEASE_DATABASE_SECRET_ARN",
    )
    database_name: str | None = Field(
        None, description="the database's name, with TASKLEASE_DATABASE_SECRET_ARN"
    )
    database_sslmode: Literal["disable", "prefer", "require", "verify-ca", "verify-full"] = Field(
        "prefer",
        description="the sslmode libpq connects with, for the URL built from TASKLEASE_DATABASE_SECRET_ARN",
    )
    queue_url: str | None = Field(
        None,
        description="the SQS queue jobs are sent to (normal priority, or every priority without priority queues); on redis, a stream key made from TASKLEASE_QUEUE_NAME when unset",
    )
    dlq_url: str | None = Field(
        None, description="the dead-letter queue paired with TASKLEASE_QUEUE_URL"
    )
    # Priorities (docs/explain/design.md#priorities): the high and low queues and their DLQs, beside the
    # normal one above. All four or none: with none, every priority shares the one queue
    # (a job's priority is kept, but orders nothing); with only some, a worker or an API
    # would send a priority's messages where no worker polls, so start-up refuses it.
    queue_url_high: str | None = Field(
        None,
        description="the high-priority queue; set all four priority queues or none (none: every priority shares TASKLEASE_QUEUE_URL)",
    )
    dlq_url_high: str | None = Field(
        None, description="the high-priority queue's dead-letter queue"
    )
    queue_url_low: str | None = Field(
        None, description="the low-priority queue; set all four priority queues or none"
    )
    dlq_url_low: str | None = Field(None, description="the low-priority queue's dead-letter queue")
    # How the local event source shares its polls among the three queues; on AWS each
    # queue's event source mapping's maximum concurrency follows the same weights (infra/).
    priority_weights: str = Field(
        priorities.DEFAULT_WEIGHTS,
        description="how the local event source shares its polls among the high, normal and low queues; on AWS each event source mapping's maximum concurrency follows the same weights",
    )
    queue_name: str = Field(
        "tasklease-jobs",
        description="the queues' base name (`tasklease queues create`, and the Redis stream keys when the URLs are unset)",
    )
    # Which carrier moves the job wake-ups (app/transport): one module per value. On
    # redis (docs/explain/design.md#redis) the queue "URLs" are stream keys, made from
    # TASKLEASE_QUEUE_NAME when unset, and TASKLEASE_REDIS_URL says where Redis is.
    transport: Literal["sqs", "redis"] = Field(
        "sqs", description="the carrier that moves the job wake-ups: SQS, or Redis Streams"
    )
    redis_url: str | None = Field(
        None,
        description="where Redis is (redis://host:port/db); required when TASKLEASE_TRANSPORT is redis",
    )
    region: str = Field(
        default_factory=lambda: (
            os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION") or "us-east-1"
        ),
        description="the AWS region; unset: AWS_REGION, else AWS_DEFAULT_REGION, else us-east-1",
    )

    # Leases. The lease is the message's visibility timeout, mirrored in the row.
    visibility_timeout_seconds: int = Field(
        30,
        ge=1,
        le=limits.MAX_VISIBILITY_SECONDS,
        description="a lease's length: the message's visibility timeout, mirrored in the job's row",
    )
    # Heartbeat this many times per lease (every visibility/N seconds).
    heartbeats_per_lease: int = Field(
        3,
        ge=2,
        le=10,
        description="a running job's lease is extended this many times per lease (every visibility timeout / N seconds)",
    )

    # Retries. Attempts are counted in the database at claim time.
    max_attempts: int = Field(
        SHARED["max_attempts"],
        ge=bounds.MIN_ATTEMPTS,
        le=bounds.MAX_ATTEMPTS,
        description="attempts a job gets by default, counted in the database when it is claimed (a kind or a job may set its own)",
    )
    # The queue's redrive policy; well above max_attempts (docs/explain/design.md#leases).
    max_receive_count: int = Field(
        SHARED["max_receive_count"],
        ge=1,
        le=limits.MAX_RECEIVE_COUNT,
        description="the queue's redrive policy: receives before SQS moves a message to the DLQ; above TASKLEASE_MAX_ATTEMPTS, only a last backstop",
    )
    # The redrive budget: a job is redriven at most this many times within the window
    # (by any path: the CLI, the API, a move task, a tool copying the DLQ back); past it a
    # redriven message is deleted unrun and the job stays dead-lettered. An operator's
    # `tasklease redrive --job ID --force` (or the API's admin ?force=true) still redrives.
    redrive_budget: int = Field(
        3,
        ge=0,
        le=1000,
        description="a job is redriven at most this many times within TASKLEASE_REDRIVE_WINDOW_SECONDS, by any path; past it a redriven message is deleted unrun (`tasklease redrive --force` still redrives)",
    )
    redrive_window_seconds: int = Field(
        86_400, ge=1, le=366 * 86_400, description="the window the redrive budget counts in"
    )
    backoff_base_seconds: float = Field(
        2.0,
        gt=0,
        le=limits.MAX_VISIBILITY_SECONDS,
        description="the retry backoff: exponential from this base, with full jitter, up to TASKLEASE_BACKOFF_CAP_SECONDS (unless the kind raised Retry with a delay)",
    )
    backoff_cap_seconds: float = Field(
        300.0,
        gt=0,
        le=limits.MAX_VISIBILITY_SECONDS,
        description="the longest delay between retries",
    )
    message_retention_seconds: int = Field(
        SHARED["message_retention_seconds"],
        ge=limits.MIN_RETENTION_SECONDS,
        le=limits.MAX_RETENTION_SECONDS,
        description="how long the queue keeps a message (SQS MessageRetentionPeriod)",
    )
    dlq_retention_seconds: int = Field(
        SHARED["dlq_retention_seconds"],
        ge=limits.MIN_RETENTION_SECONDS,
        le=limits.MAX_RETENTION_SECONDS,
        description="how long the dead-letter queue keeps a message; at least TASKLEASE_MESSAGE_RETENTION_SECONDS",
    )

    # Jobs.
    default_job_timeout_seconds: int = Field(
        600,
        ge=bounds.MIN_TIMEOUT_SECONDS,
        le=bounds.MAX_TIMEOUT_SECONDS,
        description="how long one attempt of a job may run, unless its kind or the job says otherwise",
    )

    # Database pool.
    pool_min_size: int = Field(
        1, ge=0, le=100, description="database connections each process keeps open"
    )
    pool_max_size: int = Field(
        10, ge=1, le=100, description="database connections each process opens at most"
    )

    # The modules that define the job kinds, comma-separated; there are no built-in kinds
    # (app.demos: the demos). Empty: no kinds, and the process says so at start-up.
    kinds: str = Field(
        "",
        description="the modules that define the job kinds, comma-separated (app.demos: the demos); empty: no kinds, and the process says so at start-up",
    )

    # A file the worker touches once it polls the queue (the local stack waits for it).
    worker_ready_file: str | None = Field(
        None,
        description="a file the worker touches once it polls the queue (the local stack waits for it)",
    )
    # `tasklease worker` serves GET /metrics (Prometheus) on this port; 0: it does not.
    metrics_port: int = Field(
        0,
        ge=0,
        le=65535,
        description="`tasklease worker` serves GET /metrics (Prometheus) on this port; 0: it does not",
    )
    # The address it listens on (0.0.0.0 for a Prometheus on another machine or container).
    metrics_host: str = Field(
        "127.0.0.1",
        description="the address the worker's metrics listen on (0.0.0.0 for a Prometheus on another machine)",
    )

    # On Lambda (handlers/emf.py): which counters and histograms become CloudWatch custom
    # metrics, and under which labels; Terraform sets both per deployment_profile.
    emf_metrics: str = Field(
        "all",
        description="on Lambda, the metric names written as CloudWatch EMF metrics, "
        "comma-separated; all: every one",
    )
    emf_dimensions: str = Field(
        "all",
        description="on Lambda, the labels kept as EMF dimensions, comma-separated; all: "
        "every label; none: no dimension (figures summed over the labels dropped)",
    )

    log_level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = Field(
        "INFO", description="the least severe log lines written"
    )

    @field_validator("priority_weights")
    @classmethod
    def _weights(cls, value: str) -> str:
        priorities.parse_weights(value)  # ValueError names what is wrong
        return value

    @model_validator(mode="before")
    @classmethod
    def _redis_streams(cls, data: Any) -> Any:
        return queue_settings.redis_stream_names(data)

    @field_validator("redis_url")
    @classmethod
    def _redis_url(cls, value: str | None) -> str | None:
        return queue_settings.check_redis_url(value)

    @model_validator(mode="after")
    def _coherent(self) -> Self:
        if self.transport == "redis" and not self.redis_url:
            raise ValueError(
                "TASKLEASE_REDIS_URL must be set when TASKLEASE_TRANSPORT is 'redis' "
                "(e.g. redis://127.0.0.1:6379/0)"
            )
        if self.max_receive_count <= self.max_attempts:
            raise ValueError(
                f"TASKLEASE_MAX_RECEIVE_COUNT ({self.max_receive_count}) must be above "
                f"TASKLEASE_MAX_ATTEMPTS ({self.max_attempts}): attempts are counted in the database, the redrive "
                "policy is only the last backstop"
            )
        if self.backoff_cap_seconds < self.backoff_base_seconds:
            raise ValueError(
                "TASKLEASE_BACKOFF_CAP_SECONDS must be at least TASKLEASE_BACKOFF_BASE_SECONDS"
            )
        if self.dlq_retention_seconds < self.message_retention_seconds:
            raise ValueError(
                "TASKLEASE_DLQ_RETENTION_SECONDS must be at least TASKLEASE_MESSAGE_RETENTION_SECONDS: "
                "SQS keeps a "
                "dead-lettered message's original enqueue time"
            )
        queues = ("queue_url", "dlq_url", *PRIORITY_QUEUE_FIELDS)
        queue_settings.check_priority_queues(PREFIX, {n: getattr(self, n) for n in queues})
        if self.worker_gone_seconds <= self.worker_heartbeat_seconds:
            raise ValueError(
                f"TASKLEASE_WORKER_GONE_SECONDS ({self.worker_gone_seconds}) must be above "
                f"TASKLEASE_WORKER_HEARTBEAT_SECONDS ({self.worker_heartbeat_seconds}): "
                "else a live worker shows as gone between two heartbeats"
            )
        if self.pool_min_size > self.pool_max_size:
            raise ValueError("TASKLEASE_POOL_MIN_SIZE must not exceed TASKLEASE_POOL_MAX_SIZE")
        return self

    @property
    def weights(self) -> dict[Priority, int]:
        """TASKLEASE_PRIORITY_WEIGHTS, parsed (validated at load)."""
        return priorities.parse_weights(self.priority_weights)

    @property
    def priority_queues(self) -> bool:
        """Whether high and low have queues of their own (else all share the normal one)."""
        return all(getattr(self, n) for n in PRIORITY_QUEUE_FIELDS)

    def queue_for(self, priority: Priority) -> str:
        """The source queue of a priority's jobs."""
        if priority == Priority.NORMAL or not self.priority_queues:
            return self.queue
        return str(self.queue_url_high if priority == Priority.HIGH else self.queue_url_low)

    def dlq_for(self, priority: Priority) -> str:
        """The dead-letter queue paired with a priority's source queue."""
        if priority == Priority.NORMAL or not self.priority_queues:
            return self.dlq
        return str(self.dlq_url_high if priority == Priority.HIGH else self.dlq_url_low)

    def need(self, *names: str) -> None:
        """Fail fast when a command needs a setting that is not set."""
        missing = [PREFIX + n.upper() for n in names if not self._has(n)]
        if missing:
            if "TASKLEASE_DATABASE_URL" in missing:
                missing[missing.index("TASKLEASE_DATABASE_URL")] = (
                    "TASKLEASE_DATABASE_URL (or TASKLEASE_DATABASE_SECRET_ARN with "
                    "TASKLEASE_DATABASE_HOST and TASKLEASE_DATABASE_NAME)"
                )
            raise errors.ConfigError(f"{', '.join(missing)} must be set")

    def _has(self, name: str) -> bool:
        if name == "database_url" and not self.database_url:
            return bool(self.database_secret_arn and self.database_host and self.database_name)
        return bool(getattr(self, name))

    def database_url_from(self, user: str, password: str) -> str:
        """The URL for the RDS secret's credentials and TASKLEASE_DATABASE_HOST/PORT/NAME
        (``app.transport.secrets.database_url`` reads the secret: only the transport
        package talks to AWS)."""
        assert self.database_host
        assert self.database_name
        return (
            f"postgresql://{urllib.parse.quote(user, safe='')}:{urllib.parse.quote(password, safe='')}"
            f"@{self.database_host}:{self.database_port}/{urllib.parse.quote(self.database_name, safe='')}"
            f"?sslmode={self.database_sslmode}"
        )

    @property
    def kind_modules(self) -> tuple[str, ...]:
        """TASKLEASE_KINDS as module names."""
        return tuple(m.strip() for m in self.kinds.split(",") if m.strip())

    @property
    def queue(self) -> str:
        self.need("queue_url")
        assert self.queue_url is not None
        return self.queue_url

    @property
    def dlq(self) -> str:
        self.need("dlq_url")
        assert self.dlq_url is not None
        return self.dlq_url


def load(**overrides: object) -> Settings:
    """Read the settings; a bad value raises ConfigError naming the variable."""
    return read(Settings, **overrides)


def read(cls: type[S], **overrides: object) -> S:
    """Any settings class of TASKLEASE_* variables (tasklease's own, or a kind's), read
    from the environment; a bad value raises ConfigError naming the variable."""
    try:
        return cls(**overrides)  # type: ignore[arg-type]  # pydantic accepts field kwargs
    except ValidationError as exc:
        problems = []
        for err in exc.errors():
            loc = [str(p) for p in err["loc"]]
            msg = str(err["msg"]).removeprefix("Value error, ")
            # A JSON setting's inner field too: TASKLEASE_MODEL_BUDGETS (openai/x.rps): ...
            inner = f" ({'.'.join(loc[1:])})" if len(loc) > 1 else ""
            problems.append(f"{PREFIX + loc[0].upper()}{inner}: {msg}" if loc else msg)
        raise errors.ConfigError("invalid configuration: " + "; ".join(problems)) from exc
