"""Who may call the API and what one tenant may ask of it: the keys or the authorizer,
the key hashing secret, failed-check limits, request rates, jobs in flight, the running
cap and the request body's size. A part of ``app.settings.config.Settings``."""

from __future__ import annotations

from typing import Literal

import limits as rate_limits
from pydantic import Field, SecretStr, field_validator
from pydantic_settings import BaseSettings

from app.settings import aws_limits as limits

# TASKLEASE_KEY_HASH_SECRET: 32 characters at least (hex of 16 random bytes and up).
MIN_KEY_HASH_SECRET = 32


class AccessSettings(BaseSettings):
    """Who may call the API, and how much one tenant may ask of it."""

    # Who may call the API (docs/explain/design.md#tenants): our own API keys, or the identity
    # API Gateway's authorizer put in the request context (dotted paths under
    # requestContext.authorizer).
    auth_mode: Literal["api_key", "authorizer"] = Field(
        "api_key",
        description="who may call the API: tasklease's own API keys, or the identity API Gateway's authorizer put in the request context",
    )
    authorizer_tenant_field: str = Field(
        "lambda.tenant",
        min_length=1,
        description="authorizer mode: the dotted path under requestContext.authorizer that holds the caller's tenant",
    )
    authorizer_admin_field: str | None = Field(
        "lambda.admin",
        description="authorizer mode: the dotted path of a boolean that makes the caller an admin (unset: no admin callers)",
    )
    # The server-side secret API keys are hashed with (HMAC-SHA-256) and pagination
    # cursors signed with. Unset: a random one migration 0005 made and PostgreSQL keeps.
    key_hash_secret: SecretStr | None = Field(
        default=None,
        repr=False,
        description="the server-side secret API keys are hashed with (HMAC-SHA-256) and cursors signed with, 32 characters or more; unset: a random one kept in PostgreSQL",
    )
    # Failed key checks allowed per key id and per client address, in one API process,
    # before it answers 429 without checking (a `limits` rate: "20/minute;200/hour").
    auth_failure_limit: str = Field(
        "20/minute",
        description="failed key checks allowed per key id and per client address in one API process before it answers 429 without checking (a rate such as 20/minute;200/hour)",
    )

    # What one tenant may ask of the API. Per-tenant overrides: `tasklease limits set`.
    rate_limit_per_second: float = Field(
        50.0,
        gt=0,
        le=100_000,
        description="a tenant's sustained API request rate (per-tenant overrides: `tasklease limits set`)",
    )
    rate_limit_burst: int = Field(
        100, ge=1, le=1_000_000, description="the requests a tenant may make at once above its rate"
    )
    max_jobs_in_flight: int = Field(
        10_000,
        ge=1,
        le=100_000_000,
        description="a tenant's unfinished jobs at most; a submission past it is answered 429",
    )
    # What one tenant may run at once: jobs holding a live lease (leased or running),
    # checked by the worker's claim. A message over the cap goes back, no attempt used,
    # for about running_cap_delay_seconds times (the tenant's backlog / its cap), at most
    # 30 times that (docs/explain/design.md#parking).
    max_running_per_tenant: int = Field(
        100,
        ge=1,
        le=1_000_000,
        description="a tenant's jobs holding a live lease (leased or running) at once; a message over the cap goes back without using an attempt",
    )
    running_cap_delay_seconds: float = Field(
        1.0,
        gt=0,
        le=60,
        description="how long a message over the running cap is put back for, times the tenant's backlog over its cap (at most 30 times this)",
    )
    # A tenant's window on the queue: its running cap times this many of its jobs have a
    # message or a lease at once; the rest wait parked in PostgreSQL, released one by one
    # as its leases end (a flood waits in the database, not ahead of other tenants).
    queue_window_per_slot: int = Field(
        2,
        ge=1,
        le=1000,
        description="a tenant's window on the queue: its running cap times this many of its jobs have a message or a lease at once; the rest wait parked in PostgreSQL",
    )
    # Request bodies above this are refused with 413 before they are parsed.
    max_body_bytes: int = Field(
        256 * 1024,
        ge=1024,
        le=limits.MAX_API_GATEWAY_PAYLOAD_BYTES,
        description="request bodies above this are refused with 413 before they are parsed",
    )

    @field_validator("key_hash_secret")
    @classmethod
    def _long_secret(cls, value: SecretStr | None) -> SecretStr | None:
        if value is not None and len(value.get_secret_value()) < MIN_KEY_HASH_SECRET:
            raise ValueError(
                f"must be at least {MIN_KEY_HASH_SECRET} characters of a random secret "
                "(e.g. `openssl rand -hex 32`), or unset to use the one kept in PostgreSQL"
            )
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
