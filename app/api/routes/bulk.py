"""/v1/bulk: cancel or redrive every job a filter matches, in batches a crash resumes,
and their progress. A tenant key acts on and sees its own tenant's only."""

from __future__ import annotations

import uuid
from typing import Annotated

from fastapi import APIRouter, Query

from app.api.bulk_schemas import BulkPublic, BulkRequest, BulkStarted
from app.api.deps import Db, JobQueue, Settings
from app.api.errors import COMMON, UNPARSEABLE
from app.api.schemas import Problem
from app.api.security import Caller
from app.services import bulk

router = APIRouter()


@router.post(
    "/v1/bulk",
    response_model=BulkStarted,
    status_code=202,
    responses={
        **UNPARSEABLE,
        403: {"model": Problem, "description": "a tenant key naming another tenant"},
        **COMMON,
    },
)
async def start_bulk(
    body: BulkRequest, caller: Caller, settings: Settings, db: Db, queue: JobQueue
) -> BulkStarted:
    """Count the jobs the filter matches for the action (``dry_run``: only that), else
    start the operation and answer it at once; it runs in batches of
    TASKLEASE_BULK_BATCH_SIZE (each with its cursor in one transaction), resumed by the
    sweeper if this process dies. Each job acted on gets an event naming the operation
    and the caller's key."""
    flt = body.filter.check()
    started = await bulk.start(
        settings, db, queue, caller, action=body.action, flt=flt, dry_run=body.dry_run
    )
    op = started.operation
    return BulkStarted(
        dry_run=body.dry_run, total=started.total, operation=BulkPublic.of(op) if op else None
    )


@router.get("/v1/bulk", response_model=list[BulkPublic], responses=COMMON)
async def list_bulk(
    caller: Caller, db: Db, limit: Annotated[int, Query(ge=1, le=100)] = 20
) -> list[BulkPublic]:
    """The newest bulk operations (a tenant key: its tenant's; an admin key: all)."""
    return [BulkPublic.of(op) for op in await bulk.listing(db, scope=caller.scope, limit=limit)]


@router.get("/v1/bulk/{bulk_id}", response_model=BulkPublic, responses=COMMON)
async def get_bulk(bulk_id: uuid.UUID, caller: Caller, db: Db) -> BulkPublic:
    """An operation's counts as it goes: total, done, skipped, failed, and its state."""
    return BulkPublic.of(await bulk.get(db, bulk_id, scope=caller.scope))
