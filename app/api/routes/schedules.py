"""/v1/schedules: cron schedules that make a job at each slot. Create, list, read, pause,
resume and delete them. A caller sees its own tenant's schedules (an admin key: every
tenant's); another tenant's schedule is 404, as for jobs."""

from __future__ import annotations

import uuid
from typing import Annotated

from fastapi import APIRouter, Query, Response

from app.api.deps import Db, Settings
from app.api.errors import COMMON, UNPARSEABLE
from app.api.schedule_schemas import ScheduleCreate, SchedulePublic
from app.api.schemas import Problem
from app.api.security import Caller, TenantScope
from app.services import schedules
from app.settings import bounds

router = APIRouter()


@router.post(
    "/v1/schedules",
    status_code=201,
    response_model=SchedulePublic,
    responses={
        **UNPARSEABLE,
        409: {"model": Problem, "description": "the tenant has a schedule of that name"},
        **COMMON,
    },
)
async def create_schedule(
    body: ScheduleCreate, caller: Caller, settings: Settings, db: Db, response: Response
) -> SchedulePublic:
    """A schedule for the caller's tenant: each slot of ``cron``, read in ``timezone``,
    makes one job of ``kind`` with ``payload``. The cron, the time zone, the kind and the
    payload are checked now (422 naming the field; nothing written). The first slot is
    the first after now."""
    made = await schedules.create(settings, db, body.request(), tenant=caller.tenant)
    response.headers["Location"] = f"/v1/schedules/{made['id']}"
    return SchedulePublic.of(made)


@router.get(
    "/v1/schedules",
    response_model=list[SchedulePublic],
    responses={
        403: {"model": Problem, "description": "a tenant key naming another tenant"},
        **COMMON,
    },
)
async def list_schedules(
    db: Db,
    scope: TenantScope,
    limit: Annotated[int, Query(ge=1, le=bounds.MAX_PAGE)] = 50,
) -> list[SchedulePublic]:
    """The caller's schedules, newest first (an admin key: every tenant's, or
    ``tenant``'s). A tenant key naming another tenant is 403."""
    rows = await schedules.list_schedules(db, scope=scope, limit=limit)
    return [SchedulePublic.of(r) for r in rows]


@router.get("/v1/schedules/{schedule_id}", response_model=SchedulePublic, responses=COMMON)
async def get_schedule(schedule_id: uuid.UUID, caller: Caller, db: Db) -> SchedulePublic:
    return SchedulePublic.of(await schedules.get(db, schedule_id, scope=caller.scope))


@router.post("/v1/schedules/{schedule_id}/pause", response_model=SchedulePublic, responses=COMMON)
async def pause_schedule(schedule_id: uuid.UUID, caller: Caller, db: Db) -> SchedulePublic:
    """No slot makes a job until the schedule is resumed."""
    return SchedulePublic.of(await schedules.pause(db, schedule_id, scope=caller.scope))


@router.post(
    "/v1/schedules/{schedule_id}/resume",
    response_model=SchedulePublic,
    responses={409: {"model": Problem, "description": "the cron names no time left"}, **COMMON},
)
async def resume_schedule(schedule_id: uuid.UUID, caller: Caller, db: Db) -> SchedulePublic:
    """Enabled again from the first slot after now: the slots of the pause make no job.
    Resuming a schedule that is not paused changes nothing."""
    return SchedulePublic.of(await schedules.resume(db, schedule_id, scope=caller.scope))


@router.delete("/v1/schedules/{schedule_id}", status_code=204, responses=COMMON)
async def delete_schedule(schedule_id: uuid.UUID, caller: Caller, db: Db) -> Response:
    """The schedule is gone; the jobs it made stay."""
    await schedules.delete(db, schedule_id, scope=caller.scope)
    return Response(status_code=204)
