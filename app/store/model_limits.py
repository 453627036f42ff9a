"""Model providers' limits in the database: a throttle that uses no attempt, the shared
budget per provider and model (requests and tokens of a calendar minute, across every
worker and Lambda) and a tenant's tokens of a UTC day (docs/explain/design.md#throttles)."""

from __future__ import annotations

import datetime as dt
import uuid
from dataclasses import dataclass

from app.store.pool import Database, q

# What an unset half of a budget (rpm or tpm) is compared with: no limit.
UNLIMITED = 2**62


@dataclass(frozen=True)
class Throttle:
    """How a throttle transition went: ``held``: the token still held the lease;
    ``throttled``: the job is retrying (under the cap); ``throttles``: the count before."""

    held: bool
    throttled: bool
    throttles: int


async def throttle(
    db: Database,
    job_id: uuid.UUID,
    token: uuid.UUID,
    *,
    delay: float,
    cap: int,
    error: str,
    detail: str,
) -> Throttle:
    """running -> retrying after ``delay`` s, the attempt given back, fenced by the token,
    while the job has had fewer than ``cap`` throttles."""
    row = await db.fetch_one(
        q("throttle"),
        {
            "id": job_id,
            "token": token,
            "delay": delay,
            "cap": cap,
            "error": error,
            "detail": detail,
        },
    )
    assert row is not None  # an aggregate SELECT answers one row
    return Throttle(bool(row["held"]), bool(row["throttled"]), int(row["throttles"] or 0))


@dataclass(frozen=True)
class Reservation:
    """A reserved call: settle its tokens in ``minute`` (None: over budget, wait ``wait`` s)."""

    minute: dt.datetime | None
    wait: float


async def reserve_model(
    db: Database, model: str, *, tokens: int, rpm: int | None, tpm: int | None
) -> Reservation:
    """One statement: a request and ``tokens`` in this minute of ``model``, only within
    ``rpm`` and ``tpm`` (None: that half is not limited)."""
    row = await db.fetch_one(
        q("reserve_model_budget"),
        {
            "model": model,
            "tokens": tokens,
            "rpm": UNLIMITED if rpm is None else rpm,
            "tpm": UNLIMITED if tpm is None else tpm,
        },
    )
    assert row is not None
    return Reservation(row["minute"], float(row["wait"]))


async def settle_model(db: Database, model: str, minute: dt.datetime, *, delta: int) -> None:
    """Correct the reserved estimate by ``delta`` tokens (the reported minus the estimate)."""
    if delta:
        await db.fetch(q("settle_model_budget"), {"model": model, "minute": minute, "delta": delta})


@dataclass(frozen=True)
class TenantReservation:
    """The job's tenant and its daily budget (None: none applies); ``day`` reserved in
    (None with a budget: over it until ``next_day``, the next UTC midnight)."""

    tenant: str
    budget: int | None
    day: dt.date | None
    next_day: dt.datetime


async def reserve_tenant(
    db: Database, job_id: uuid.UUID, *, tokens: int, default: int | None
) -> TenantReservation | None:
    """One statement: ``tokens`` in the job's tenant's day, within its budget (its own,
    else ``default``). None when the job is gone."""
    row = await db.fetch_one(
        q("reserve_tenant_tokens"), {"job_id": job_id, "tokens": tokens, "default": default}
    )
    if row is None:
        return None
    budget = None if row["budget"] is None else int(row["budget"])
    return TenantReservation(row["tenant"], budget, row["reserved"], row["next_day"])


async def settle_tenant(db: Database, tenant: str, day: dt.date, *, delta: int) -> None:
    if delta:
        await db.fetch(q("settle_tenant_tokens"), {"tenant": tenant, "day": day, "delta": delta})


async def any_tenant_daily_tokens(db: Database) -> bool:
    row = await db.fetch_one(q("any_tenant_daily_tokens"))
    return bool(row and row["any"])


async def set_tenant_daily_tokens(db: Database, tenant: str, daily_tokens: int | None) -> None:
    await db.fetch(q("set_tenant_daily_tokens"), {"tenant": tenant, "daily_tokens": daily_tokens})


async def prune(db: Database) -> int:
    """Drop minutes and days nothing reads any more; how many rows went."""
    row = await db.fetch_one(q("prune_model_budgets"))
    return int(row["pruned"]) if row else 0
