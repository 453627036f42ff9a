"""Per-tenant overrides of the deployment's limits: admission and running."""

from __future__ import annotations

from app.store.pool import Database, q
from app.store.records import TenantLimits, TenantUsage


async def set_limits(
    db: Database,
    tenant: str,
    *,
    rate_per_second: float | None = None,
    burst: int | None = None,
    max_in_flight: int | None = None,
    max_running: int | None = None,
) -> TenantLimits:
    """Override the limits given; the others keep their value (None: the default)."""
    row = await db.fetch_one(
        q("set_tenant_limits"),
        {
            "tenant": tenant,
            "rate_per_second": rate_per_second,
            "burst": burst,
            "max_in_flight": max_in_flight,
            "max_running": max_running,
        },
    )
    if row is None:  # pragma: no cover - an upsert ... RETURNING answers its row
        raise RuntimeError("set_tenant_limits returned no row")
    return TenantLimits.from_row(row)


async def clear_limits(db: Database, tenant: str) -> bool:
    """Drop the tenant's overrides; False when it had none."""
    return bool(await db.fetch(q("clear_tenant_limits"), {"tenant": tenant}))


async def list_limits(db: Database) -> list[TenantUsage]:
    """Every tenant with a key or an override: its overrides and its unfinished jobs."""
    return [TenantUsage.from_row(row) for row in await db.fetch(q("list_tenant_limits"))]
