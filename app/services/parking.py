"""Parked jobs (docs/explain/design.md#parking): a job submitted past its tenant's window on
the queue, or delivered while its tenant was at its running cap, waits in PostgreSQL with
no message; as the tenant's leases end, one goes out for each free slot. The worker
releases when a lease of a tenant with parked jobs ends; the sweeper releases for every
such tenant each pass (a release no lease's end made)."""

from __future__ import annotations

import contextlib

from app import crashpoints, errors, metrics, store
from app.services import outbox
from app.settings.config import Settings
from app.transport import Transport

# Tenants with parked jobs one sweep releases for.
SWEEP_TENANTS = 1000


async def release_parked(
    settings: Settings, db: store.Database, queue: Transport, tenants: list[str]
) -> int:
    """Unpark these tenants' oldest parked jobs as far as their windows have room, and
    send them; how many were released."""
    rows, keyed = await store.leases.release_parked(
        db,
        tenants,
        max_running=settings.max_running_per_tenant,
    )
    if not rows:
        return 0
    crashpoints.hit(crashpoints.Point.AFTER_RELEASE, count=len(rows))
    if keyed:
        crashpoints.hit(crashpoints.Point.AFTER_KEY_RELEASE, count=keyed)
    metrics.count(metrics.RELEASED, len(rows))
    with contextlib.suppress(errors.QueueError):
        await outbox.send(db, queue, rows)
    return len(rows)


async def release_all(settings: Settings, db: store.Database, queue: Transport) -> int:
    """The sweeper's part: every tenant with parked jobs, released as far as its window
    has room (a release no lease's end made)."""
    tenants = await store.leases.parked_tenants(db, limit=SWEEP_TENANTS)
    return await release_parked(settings, db, queue, tenants) if tenants else 0
