"""/v1/dead-letters: the jobs that used up their attempts, and sending them back. A
tenant's key sees its own; an admin key sees and redrives every tenant's."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query

from app.api.dead_letter_schemas import RedriveRequest, RedriveSummary
from app.api.deps import Db, JobQueue, Settings
from app.api.errors import COMMON, UNPARSEABLE
from app.api.schemas import (
    JobPublic,
    Problem,
    Storable,
)
from app.api.security import Admin, TenantScope
from app.services import redrive
from app.settings import bounds

router = APIRouter()


@router.get(
    "/v1/dead-letters",
    response_model=list[JobPublic],
    responses={
        403: {"model": Problem, "description": "a tenant key naming another tenant"},
        **COMMON,
    },
)
async def dead_letters(
    db: Db,
    scope: TenantScope,
    kind: Annotated[str | None, Query(max_length=100), Storable] = None,
    limit: Annotated[int, Query(ge=1, le=bounds.MAX_PAGE)] = 50,
) -> list[JobPublic]:
    """Dead-lettered jobs, oldest first: kind, attempts, last error, when. The caller's
    own; an admin key sees every tenant's, or one tenant's with ``tenant``."""
    rows = await redrive.dead_letters(db, scope=scope, kind=kind, limit=limit)
    return [JobPublic.of(r) for r in rows]


@router.post(
    "/v1/dead-letters/redrive",
    response_model=RedriveSummary,
    responses={
        **UNPARSEABLE,
        403: {"model": Problem, "description": "not an admin key"},
        **COMMON,
    },
)
async def redrive_dead_letters(
    body: RedriveRequest, caller: Admin, settings: Settings, db: Db, queue: JobQueue
) -> RedriveSummary:
    """Admin: redrive dead letters across tenants, chosen by job ids, kind, tenant and a
    limit (none of them: the whole DLQ, as `tasklease redrive` does)."""
    report = await redrive.redrive(
        settings,
        db,
        queue,
        job_ids=body.job_ids,
        kind=body.kind,
        tenant=body.tenant,
        limit=body.limit,
        force=body.force,
    )
    return RedriveSummary.of(report)
