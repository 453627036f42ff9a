"""GET /v1/workers: the worker processes and Lambda environments that run the jobs, each
alive, gone or stopped (docs/explain/design.md#workers). Admin only: a worker serves
every tenant, so its list is the deployment's, not a tenant's (403 for a tenant key)."""

from __future__ import annotations

import datetime as dt
from typing import Literal

from fastapi import APIRouter
from pydantic import BaseModel, Field

from app.api.deps import Db, Settings
from app.api.errors import COMMON
from app.api.schemas import Problem
from app.api.security import Admin
from app.services import workers

router = APIRouter()


class WorkerPublic(BaseModel):
    id: str = Field(description="a process: a uuid per start; Lambda: lambda:FUNCTION:LOG_STREAM")
    name: str = Field(description="the lease owner (TASKLEASE_WORKER_ID), or the function's name")
    runtime: Literal["process", "lambda"]
    status: Literal["alive", "gone", "stopped", "idle"] = Field(
        description="a process: alive, gone (not seen for TASKLEASE_WORKER_GONE_SECONDS: "
        "killed or cut off) or stopped (a clean stop); a Lambda environment: alive "
        "(invoked within that bound) or idle"
    )
    host: str = Field(description="the host name; Lambda: the environment's log stream")
    pid: int
    carrier: str = Field(description="sqs or redis")
    version: str = Field(description="tasklease's version")
    started_at: dt.datetime
    last_seen: dt.datetime
    seen_seconds_ago: float = Field(description="by the database's clock")
    running: int = Field(description="a process: jobs it runs now (as of last_seen)")
    invocations: int = Field(description="a Lambda environment: invocations recorded")
    messages: int = Field(description="a Lambda environment: records those invocations carried")
    stopped_at: dt.datetime | None


class WorkerList(BaseModel):
    workers: list[WorkerPublic] = Field(description="the most recently seen first, 500 at most")
    heartbeat_seconds: float = Field(description="TASKLEASE_WORKER_HEARTBEAT_SECONDS")
    gone_after_seconds: float = Field(description="TASKLEASE_WORKER_GONE_SECONDS")


@router.get(
    "/v1/workers",
    response_model=WorkerList,
    responses={403: {"model": Problem, "description": "not an admin key"}, **COMMON},
)
async def list_workers(caller: Admin, settings: Settings, db: Db) -> WorkerList:
    """Admin: the worker processes and Lambda environments, most recently seen first."""
    rows = await workers.listing(settings, db)
    return WorkerList(
        workers=[
            WorkerPublic(
                id=r.id,
                name=r.name,
                runtime=r.runtime,  # type: ignore[arg-type]  # the table's CHECK
                status=r.status,  # type: ignore[arg-type]  # the query's CASE
                host=r.host,
                pid=r.pid,
                carrier=r.carrier,
                version=r.version,
                started_at=r.started_at,
                last_seen=r.last_seen,
                seen_seconds_ago=round(r.seen_ago, 3),
                running=r.running,
                invocations=r.invocations,
                messages=r.messages,
                stopped_at=r.stopped_at,
            )
            for r in rows
        ],
        heartbeat_seconds=settings.worker_heartbeat_seconds,
        gone_after_seconds=settings.worker_gone_seconds,
    )
