"""One typed settings object, read from ``TASKLEASE_*`` and the standard AWS variables.

Bad configuration fails at start-up with a message that names the variable and
the allowed range. The SQS endpoint is not a tasklease setting: boto3 reads
``AWS_ENDPOINT_URL_SQS`` (or ``AWS_ENDPOINT_URL``) itself, so the same code
talks to AWS, LocalStack or moto's server.
"""

from __future__ import annotations

import json
import os
import socket
import urllib.parse
from pathlib import Path
from typing import Annotated, Any, Literal, Self, TypeVar

import limits as rate_limits
from pydantic import (
    Field,
    SecretStr,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from app import errors, priorities
from app.priorities import Priority
from app.settings import aws_limits as limits
from app.settings import bounds
from app.settings import models as model_settings
from app.settings import queues as queue_settings
from app.settings.models import ModelBudget, ModelPrice
from app.settings.queues import PRIORITY_QUEUE_FIELDS
from app.settings.retention import RetentionSettings

PREFIX = "TASKLEASE_"
S = TypeVar("S", bound=BaseSettings)
# TASKLEASE_KEY_HASH_SECRET: 32 characters at least (hex of 16 random bytes and up).
MIN_KEY_HASH_SECRET = 32

# Settings the code and the deployment share; infra/*.tf reads the same file and
# tests/infra/test_drift.py fails on any drift. Visibility and the function timeout
# differ on purpose: the local defaults suit one machine, the file's suit Lambda.
SHARED: dict[str, Any] = json.loads(Path(__file__).with_name("shared_settings.json").read_text())


class Settings(RetentionSettings, BaseSettings):
    model_config = SettingsConfigDict(env_prefix=PREFIX, extra="ignore", frozen=True)

    # Endpoints. Optional here; each command asks for the ones it needs with need().
    database_url: str | None = None
    # On AWS: the RDS-managed secret ({"username", "password"}) and where the server is.
    database_secret_arn: str | None = None
    database_host: str | None = None
    database_port: int = Field(5432, ge=1, le=65535)
    database_name: str | None = None
    database_sslmode: Literal["disable", "prefer", "require", "verify-ca", "verify-full"] = "prefer"
    queue_url: str | None = None
    dlq_url: str | None = None
    # Priorities (README "Priorities"): the high and low queues and their DLQs, beside the
    # normal one above. All four or none: with none, every priority shares the one queue
    # (a job's priority is kept, but orders nothing); with only some, a worker or an API
    # would send a priority's messages where no worker polls, so start-up refuses it.
    queue_url_high: str | None = None
    dlq_url_high: str | None = None
    queue_url_low: str | None = None
    dlq_url_low: str | None = None
    # How the local event source shares its polls among the three queues; on AWS each
    # queue's event source mapping's maximum concurrency follows the same weights (infra/).
    priority_weights: str = priorities.DEFAULT_WEIGHTS
    queue_name: str = "tasklease-jobs"
    # Which carrier moves the job wake-ups (app/transport): one module per value. On
    # redis (README "Redis Streams") the queue "URLs" are stream keys, made from
    # TASKLEASE_QUEUE_NAME when unset, and TASKLEASE_REDIS_URL says where Redis is.
    transport: Literal["sqs", "redis"] = "sqs"
    redis_url: str | None = None
    region: str = Field(
        default_factory=lambda: (
            os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION") or "us-east-1"
        )
    )

    # Leases. The lease is the message's visibility timeout, mirrored in the row.
    visibility_timeout_seconds: int = Field(30, ge=1, le=limits.MAX_VISIBILITY_SECONDS)
    # Heartbeat this many times per lease (every visibility/N seconds).
    heartbeats_per_lease: int = Field(3, ge=2, le=10)

    # Retries. Attempts are counted in the database at claim time.
    max_attempts: int = Field(
        SHARED["max_attempts"], ge=bounds.MIN_ATTEMPTS, le=bounds.MAX_ATTEMPTS
    )
    # The queue's redrive policy; well above max_attempts (see DESIGN.md).
    max_receive_count: int = Field(SHARED["max_receive_count"], ge=1, le=limits.MAX_RECEIVE_COUNT)
    # The redrive budget: a job is redriven at most this many times within the window
    # (by any path: the CLI, the API, a move task, a tool copying the DLQ back); past it a
    # redriven message is deleted unrun and the job stays dead-lettered. An operator's
    # `tasklease redrive --job ID --force` (or the API's admin ?force=true) still redrives.
    redrive_budget: int = Field(3, ge=0, le=1000)
    redrive_window_seconds: int = Field(86_400, ge=1, le=366 * 86_400)
    backoff_base_seconds: float = Field(2.0, gt=0, le=limits.MAX_VISIBILITY_SECONDS)
    backoff_cap_seconds: float = Field(300.0, gt=0, le=limits.MAX_VISIBILITY_SECONDS)
    message_retention_seconds: int = Field(
        SHARED["message_retention_seconds"],
        ge=limits.MIN_RETENTION_SECONDS,
        le=limits.MAX_RETENTION_SECONDS,
    )
    dlq_retention_seconds: int = Field(
        SHARED["dlq_retention_seconds"],
        ge=limits.MIN_RETENTION_SECONDS,
        le=limits.MAX_RETENTION_SECONDS,
    )

    # Who may call the API (README "Who may do what"): our own API keys, or the identity
    # API Gateway's authorizer put in the request context (dotted paths under
    # requestContext.authorizer).
    auth_mode: Literal["api_key", "authorizer"] = "api_key"
    authorizer_tenant_field: str = Field("lambda.tenant", min_length=1)
    authorizer_admin_field: str | None = "lambda.admin"
    # The server-side secret API keys are hashed with (HMAC-SHA-256) and pagination
    # cursors signed with. Unset: a random one migration 0005 made and PostgreSQL keeps.
    key_hash_secret: SecretStr | None = Field(default=None, repr=False)
    # Failed key checks allowed per key id and per client address, in one API process,
    # before it answers 429 without checking (a `limits` rate: "20/minute;200/hour").
    auth_failure_limit: str = "20/minute"

    # What one tenant may ask of the API. Per-tenant overrides: `tasklease limits set`.
    rate_limit_per_second: float = Field(50.0, gt=0, le=100_000)
    rate_limit_burst: int = Field(100, ge=1, le=1_000_000)
    max_jobs_in_flight: int = Field(10_000, ge=1, le=100_000_000)
    # What one tenant may run at once: jobs holding a live lease (leased or running),
    # checked by the worker's claim. A message over the cap goes back, no attempt used,
    # for about running_cap_delay_seconds times (the tenant's backlog / its cap), at most
    # 30 times that (README "Who may do what").
    max_running_per_tenant: int = Field(100, ge=1, le=1_000_000)
    running_cap_delay_seconds: float = Field(1.0, gt=0, le=60)
    # A tenant's window on the queue: its running cap times this many of its jobs have a
    # message or a lease at once; the rest wait parked in PostgreSQL, released one by one
    # as its leases end (a flood waits in the database, not ahead of other tenants).
    queue_window_per_slot: int = Field(2, ge=1, le=1000)
    # Request bodies above this are refused with 413 before they are parsed.
    max_body_bytes: int = Field(256 * 1024, ge=1024, le=limits.MAX_API_GATEWAY_PAYLOAD_BYTES)

    # Jobs.
    default_job_timeout_seconds: int = Field(
        600, ge=bounds.MIN_TIMEOUT_SECONDS, le=bounds.MAX_TIMEOUT_SECONDS
    )

    # The local event source (what Lambda's event source mapping does on AWS).
    batch_size: int = Field(SHARED["batch_size"], ge=1, le=limits.MAX_BATCH)
    wait_time_seconds: int = Field(20, ge=0, le=limits.MAX_WAIT_SECONDS)
    function_timeout_seconds: int = Field(900, ge=1, le=limits.MAX_LAMBDA_TIMEOUT_SECONDS)
    # Hand the lease back when less than this is left of the invocation.
    handback_margin_seconds: float = Field(10.0, ge=0)
    worker_id: str = Field(default_factory=lambda: f"{socket.gethostname()}:{os.getpid()}")

    # Outbox relay and sweeper.
    outbox_grace_seconds: float = Field(5.0, ge=0)
    sweep_interval_seconds: float = Field(5.0, gt=0)
    # A queued/retrying/stalled job that saw no change for this long gets a new message.
    lost_message_seconds: float = Field(900.0, gt=0)
    # Look into the DLQ (receive its messages) at most this often across all sweepers, and
    # only when it holds messages the database does not account for (README "The sweeper
    # and the dead-letter queue").
    dlq_scan_interval_seconds: float = Field(300.0, ge=1, le=86_400)
    # Waits (README "Jobs that wait"): a wake-up due within this many seconds is sent
    # with SQS's DelaySeconds (at most 15 minutes); a later one is sent by the sweeper
    # once it is that close. Tests shorten it to cross the cap without waiting 15 min.
    max_message_delay_seconds: int = Field(
        limits.MAX_DELAY_SECONDS, ge=0, le=limits.MAX_DELAY_SECONDS
    )
    # A wake-up still not acted on this long after it was due is presumed lost: re-sent.
    wake_grace_seconds: float = Field(60.0, gt=0, le=86_400)

    # Database pool.
    pool_min_size: int = Field(1, ge=0, le=100)
    pool_max_size: int = Field(10, ge=1, le=100)

    # A throttle (429, 503 with Retry-After) retries after the provider's delay without
    # using an attempt; past this many throttles of one job it is dead-lettered.
    max_throttles: int = Field(20, ge=1, le=100_000)
    # The delay when the provider gives none (jittered), and the most a provider may ask.
    throttle_delay_seconds: float = Field(5.0, gt=0, le=limits.MAX_VISIBILITY_SECONDS)
    max_throttle_delay_seconds: float = Field(300.0, gt=0, le=limits.MAX_VISIBILITY_SECONDS)
    # Shared budgets per "provider/model" (JSON: {"openai/gpt-4o-mini": {"rpm": 500,
    # "tpm": 200000}}): a call over it waits. None set: no reservation round trip.
    model_budgets: Annotated[dict[str, ModelBudget], NoDecode] = Field(default_factory=dict)
    # A tenant's model tokens per UTC day (default; `tasklease limits set --daily-tokens`
    # per tenant). Unset: no daily budget unless a tenant has one.
    tenant_daily_tokens: int | None = Field(None, ge=1, le=10**15)
    # Past a tenant's daily budget its model calls wait for the next UTC day, or fail.
    tenant_budget_policy: Literal["wait", "fail"] = "wait"
    # US dollars per million tokens, by model (JSON), over DEFAULT_MODEL_PRICES.
    model_prices: Annotated[dict[str, ModelPrice], NoDecode] = Field(default_factory=dict)

    # The modules that define the job kinds, comma-separated; there are no built-in kinds
    # (app.demos: the demos). Empty: no kinds, and the process says so at start-up.
    kinds: str = ""

    # A file the worker touches once it polls the queue (the local stack waits for it).
    worker_ready_file: str | None = None
    # `tasklease worker` serves GET /metrics (Prometheus) on this port; 0: it does not.
    metrics_port: int = Field(0, ge=0, le=65535)
    # The address it listens on (0.0.0.0 for a Prometheus on another machine or container).
    metrics_host: str = "127.0.0.1"

    log_level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = "INFO"

    @field_validator("model_prices", mode="before")
    @classmethod
    def _prices_json(cls, v: Any) -> Any:
        return model_settings.prices_json(v)

    @field_validator("model_budgets", mode="before")
    @classmethod
    def _budgets_json(cls, v: Any) -> Any:
        return model_settings.budgets_json(v)

    @field_validator("model_prices")
    @classmethod
    def _with_default_prices(cls, v: dict[str, ModelPrice]) -> dict[str, ModelPrice]:
        return model_settings.with_default_prices(v)

    @field_validator("key_hash_secret")
    @classmethod
    def _long_secret(cls, value: SecretStr | None) -> SecretStr | None:
        if value is not None and len(value.get_secret_value()) < MIN_KEY_HASH_SECRET:
            raise ValueError(
                f"must be at least {MIN_KEY_HASH_SECRET} characters of a random secret "
                "(e.g. `openssl rand -hex 32`), or unset to use the one kept in PostgreSQL"
            )
        return value

    @field_validator("priority_weights")
    @classmethod
    def _weights(cls, value: str) -> str:
        priorities.parse_weights(value)  # ValueError names what is wrong
        return value

    @field_validator("auth_failure_limit")
    @classmethod
    def _failure_rate(cls, value: str) -> str:
        try:
            rate_limits.parse_many(value)
        except ValueError as exc:
            raise ValueError(
                f"{value!r} is not a rate such as '20/minute' or '20/minute;200/hour'"
            ) from exc
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
