"""Per-tenant limits: the overrides an operator sets, clears and lists (`tasklease
limits`). The API reads the admission limits when it admits a job (submit.py); the
worker's claim reads the running cap (store/sql/queries/leases.sql, claim_batch)."""

from __future__ import annotations

from app import store
from app.store.records import TenantUsage


async def set_limits(
    db: store.Database,
    tenant: str,
    *,
    rate_per_second: float | None,
    burst: int | None,
    max_in_flight: int | None,
    max_running: int | None = None,
) -> list[TenantUsage]:
    """Override the limits given (None keeps the current value); the tenant's row after."""
    await store.tenants.set_limits(
        db,
        tenant,
        rate_per_second=rate_per_second,
        burst=burst,
        max_in_flight=max_in_flight,
        max_running=max_running,
    )
    return [r for r in await store.tenants.list_limits(db) if r.tenant == tenant]


async def set_daily_tokens(db: store.Database, tenant: str, daily_tokens: int) -> None:
    """The tenant's model tokens per UTC day (docs/explain/design.md#throttles)."""
    await store.model_limits.set_tenant_daily_tokens(db, tenant, daily_tokens)


async def clear_limits(db: store.Database, tenant: str) -> bool:
    """Drop the tenant's overrides; whether it had any."""
    return await store.tenants.clear_limits(db, tenant)


async def list_limits(db: store.Database) -> list[TenantUsage]:
    """Every tenant with a key or an override: its overrides (None: the default), its
    unfinished jobs and its jobs holding a live lease."""
    return await store.tenants.list_limits(db)
