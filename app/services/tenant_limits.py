"""Per-tenant limits on job submission: the overrides an operator sets, clears and lists
(`tasklease limits`). The API reads them when it admits a job (submit.py)."""

from __future__ import annotations

from typing import Any

from app.store.pool import Database, q


async def set_limits(
    db: Database,
    tenant: str,
    *,
    rate_per_second: float | None,
    burst: int | None,
    max_in_flight: int | None,
) -> list[dict[str, Any]]:
    """Override the limits given (None keeps the current value); the tenant's row after."""
    await db.fetch(
        q("set_tenant_limits"),
        {
            "tenant": tenant,
            "rate_per_second": rate_per_second,
            "burst": burst,
            "max_in_flight": max_in_flight,
        },
    )
    return [r for r in await list_limits(db) if r["tenant"] == tenant]


async def clear_limits(db: Database, tenant: str) -> bool:
    """Drop the tenant's overrides; whether it had any."""
    return bool(await db.fetch(q("clear_tenant_limits"), {"tenant": tenant}))


async def list_limits(db: Database) -> list[dict[str, Any]]:
    """Every tenant with a key or an override: its overrides (None: the default) and its
    unfinished jobs."""
    return await db.fetch(q("list_tenant_limits"))
