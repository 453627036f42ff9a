"""The state a job publishes (``ctx.set_state``): every key (``GET /v1/jobs/{id}/state``)
or one (``GET /v1/jobs/{id}/state/{key}``), which a caller can wait on: with
``after_version``, a long poll that answers once the key's version is past it. The job's
stream carries each change as a ``state`` event too. Another tenant's job is 404."""

from __future__ import annotations

import datetime as dt
import uuid
from typing import Annotated, Any

from fastapi import APIRouter, Path, Query, Request
from pydantic import BaseModel

from app.api.deps import Db, Runtime
from app.api.errors import COMMON
from app.api.schemas import Storable
from app.api.security import Caller
from app.services import state as service
from app.services.streams import MAX_WAIT_SECONDS
from app.settings import bounds

router = APIRouter()


class StatePublic(BaseModel):
    """One key a job published: its version counts its changes (1: its first value)."""

    key: str
    version: int
    attempt: int  # the attempt that set it
    updated_at: dt.datetime  # when it was set
    value: Any  # last: the one field of any size


class StatePage(BaseModel):
    """Every key a job published."""

    items: list[StatePublic]  # by key


@router.get("/v1/jobs/{job_id}/state", response_model=StatePage, responses=COMMON)
async def get_state(job_id: uuid.UUID, caller: Caller, db: Db) -> StatePage:
    """Every key the job published with ``ctx.set_state``, by key (none yet: empty)."""
    found = await service.of_job(db, job_id, scope=caller.scope)
    return StatePage(items=[StatePublic.model_validate(s) for s in found])


@router.get("/v1/jobs/{job_id}/state/{key:path}", response_model=StatePublic, responses=COMMON)
async def get_state_key(
    job_id: uuid.UUID,
    key: Annotated[str, Path(min_length=1, max_length=bounds.MAX_STATE_KEY_CHARS), Storable],
    request: Request,
    caller: Caller,
    db: Db,
    after_version: Annotated[
        int | None,
        Query(
            ge=0, le=2**62, description="answer once the key's version is past this (0: once set)"
        ),
    ] = None,
    wait: Annotated[
        float,
        Query(ge=0, le=MAX_WAIT_SECONDS, description="with after_version: seconds to wait"),
    ] = 20.0,
) -> StatePublic:
    """The job's ``key``; 404 naming it while unset. With ``after_version``: as soon as
    the key's version is past it, waiting up to ``wait`` seconds for it to appear or
    change (not once the job is finished); then what it holds (compare the version), or
    404 if it is still unset."""
    runtime: Runtime = request.app.state.runtime
    found = await service.one(
        db,
        runtime.stream_hub(),
        job_id,
        key,
        scope=caller.scope,
        after_version=after_version,
        wait=wait,
    )
    return StatePublic.model_validate(found)
