"""The HTTP API (FastAPI), versioned under /v1. handlers/api.py serves it through Mangum."""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import logging
import uuid
from collections.abc import AsyncIterator
from typing import Annotated, Any

from fastapi import Depends, FastAPI, Header, Query, Request, Response
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field

from app import __version__, errors, limits, redrive, service
from app import config as config_mod
from app.db import Database
from app.queue import Queue
from app.states import JobState

log = logging.getLogger(__name__)


# --- models ---------------------------------------------------------------------


class JobCreate(BaseModel):
    model_config = ConfigDict(extra="forbid")

    kind: str = Field(min_length=1, max_length=100, examples=["support.triage"])
    payload: dict[str, Any] = Field(
        examples=[{"ticket_id": "T-1", "subject": "Refund", "body": "I was charged twice."}]
    )
    max_attempts: int | None = Field(None, ge=1, le=100)
    timeout_seconds: int | None = Field(None, ge=1, le=limits.MAX_VISIBILITY_SECONDS)


class JobPublic(BaseModel):
    id: uuid.UUID
    kind: str
    state: JobState
    attempt: int
    max_attempts: int
    timeout_seconds: int
    payload: dict[str, Any]
    result: Any | None
    last_error: str | None
    lease_owner: str | None
    lease_expires_at: dt.datetime | None
    redrives: int
    cancel_requested: bool
    dead_lettered_by: str | None
    created_at: dt.datetime
    updated_at: dt.datetime
    started_at: dt.datetime | None
    finished_at: dt.datetime | None

    @classmethod
    def of(cls, row: dict[str, Any]) -> JobPublic:
        return cls.model_validate({k: row[k] for k in cls.model_fields})


class JobPage(BaseModel):
    items: list[JobPublic]
    next_cursor: str | None


class EventPublic(BaseModel):
    at: dt.datetime
    from_state: JobState | None
    to_state: JobState
    attempt: int
    worker: str | None
    detail: str | None


class EffectPublic(BaseModel):
    key: str
    seq: int
    result: Any
    attempt: int
    worker: str | None
    recorded_at: dt.datetime


class Problem(BaseModel):
    detail: str


# --- wiring ---------------------------------------------------------------------


class Runtime:
    """The API's long-lived clients: opened by uvicorn's lifespan, or on the first request
    of a Lambda process (handlers/api.py turns Mangum's per-invocation lifespan off, so a
    warm function keeps its pool). A psycopg pool cannot be reopened once closed: each
    opening builds its own."""

    def __init__(self, settings: config_mod.Settings) -> None:
        settings.need("database_url", "queue_url", "dlq_url")
        self.settings = settings
        self._db: Database | None = None
        self.sqs = Queue(settings)
        self._lock = asyncio.Lock()

    @property
    def db(self) -> Database:
        if self._db is None:
            raise errors.StoreError("the API's database pool is not open")
        return self._db

    async def open(self) -> None:
        async with self._lock:
            if self._db is not None:
                return
            s = self.settings
            db = Database(s.database, min_size=s.pool_min_size, max_size=s.pool_max_size)
            await db.open(wait=False)
            await self.sqs.open()
            self._db = db

    async def close(self) -> None:
        async with self._lock:
            if self._db is None:
                return
            await self.sqs.close()
            await self._db.close()
            self._db = None


async def _runtime(request: Request) -> Runtime:
    rt: Runtime = request.app.state.runtime
    await rt.open()  # a no-op once open
    return rt


Rt = Annotated[Runtime, Depends(_runtime)]

STATUS = {
    errors.BadRequest: 422,
    errors.NotFound: 404,
    errors.Conflict: 409,
    errors.StoreError: 503,
    errors.QueueError: 503,
}


def create_app(settings: config_mod.Settings | None = None) -> FastAPI:
    settings = settings or config_mod.load()
    runtime = Runtime(settings)

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        await runtime.open()
        try:
            yield
        finally:
            await runtime.close()

    app = FastAPI(
        title="tasklease",
        version=__version__,
        summary="Durable asynchronous jobs for long AI work on SQS, Lambda and PostgreSQL.",
        lifespan=lifespan,
    )
    app.state.runtime = runtime

    @app.exception_handler(errors.TaskleaseError)
    async def _error(request: Request, exc: errors.TaskleaseError) -> JSONResponse:
        status = next((code for cls, code in STATUS.items() if isinstance(exc, cls)), 500)
        if status >= 500:
            log.error("request failed: %s", exc)
        return JSONResponse({"detail": str(exc)}, status_code=status)

    responses: dict[int | str, dict[str, Any]] = {
        404: {"model": Problem},
        422: {"model": Problem},
        503: {"model": Problem},
    }

    @app.post(
        "/v1/jobs",
        status_code=202,
        response_model=JobPublic,
        responses={409: {"model": Problem}, **responses},
    )
    async def create_job(
        body: JobCreate,
        rt: Rt,
        response: Response,
        idempotency_key: Annotated[
            str | None, Header(max_length=service.MAX_IDEMPOTENCY_KEY)
        ] = None,
    ) -> JobPublic:
        """Accept a job: it is durable when this answers 202, and runs later."""
        submitted = await service.submit(
            rt.settings,
            rt.db,
            rt.sqs,
            kind=body.kind,
            payload=body.payload,
            max_attempts=body.max_attempts,
            timeout_seconds=body.timeout_seconds,
            idempotency_key=idempotency_key,
        )
        response.headers["Location"] = f"/v1/jobs/{submitted.job['id']}"
        if not submitted.created:
            response.headers["Idempotent-Replayed"] = "true"
        return JobPublic.of(submitted.job)

    @app.get("/v1/jobs", response_model=JobPage, responses={400: {"model": Problem}, **responses})
    async def list_jobs(
        rt: Rt,
        state: JobState | None = None,
        kind: Annotated[str | None, Query(max_length=100)] = None,
        limit: Annotated[int, Query(ge=1, le=service.MAX_PAGE)] = 50,
        cursor: Annotated[str | None, Query(max_length=200)] = None,
    ) -> JobPage | JSONResponse:
        try:
            rows, next_cursor = await service.list_jobs(
                rt.db, state=state, kind=kind, limit=limit, cursor=cursor
            )
        except errors.BadRequest as exc:
            return JSONResponse({"detail": str(exc)}, status_code=400)
        return JobPage(items=[JobPublic.of(r) for r in rows], next_cursor=next_cursor)

    @app.get("/v1/jobs/{job_id}", response_model=JobPublic, responses=responses)
    async def get_job(job_id: uuid.UUID, rt: Rt) -> JobPublic:
        return JobPublic.of(await service.get_job(rt.db, job_id))

    @app.get("/v1/jobs/{job_id}/events", response_model=list[EventPublic], responses=responses)
    async def get_events(job_id: uuid.UUID, rt: Rt) -> list[EventPublic]:
        return [EventPublic.model_validate(e) for e in await service.events(rt.db, job_id)]

    @app.get("/v1/jobs/{job_id}/effects", response_model=list[EffectPublic], responses=responses)
    async def get_effects(job_id: uuid.UUID, rt: Rt) -> list[EffectPublic]:
        return [EffectPublic.model_validate(e) for e in await service.effects(rt.db, job_id)]

    conflict = {409: {"model": Problem}, **responses}

    @app.post("/v1/jobs/{job_id}/cancel", response_model=JobPublic, responses=conflict)
    async def cancel_job(job_id: uuid.UUID, rt: Rt) -> JobPublic:
        """Cancel: at once when the job waits; a running job stops at its next heartbeat
        (``cancel_requested`` is true until then). A finished job is 409."""
        return JobPublic.of(await service.cancel(rt.db, job_id))

    @app.post(
        "/v1/jobs/{job_id}/redrive", response_model=JobPublic, status_code=202, responses=conflict
    )
    async def redrive_job(job_id: uuid.UUID, rt: Rt) -> JobPublic:
        """Send a dead-lettered job back to the queue with a fresh attempt budget."""
        return JobPublic.of(await redrive.redrive_job(rt.db, rt.sqs, job_id))

    @app.get("/v1/dead-letters", response_model=list[JobPublic], responses=responses)
    async def dead_letters(
        rt: Rt,
        kind: Annotated[str | None, Query(max_length=100)] = None,
        limit: Annotated[int, Query(ge=1, le=service.MAX_PAGE)] = 50,
    ) -> list[JobPublic]:
        """Dead-lettered jobs, oldest first: kind, attempts, last error, when."""
        return [JobPublic.of(r) for r in await redrive.dead_letters(rt.db, kind=kind, limit=limit)]

    @app.get("/healthz")
    async def healthz() -> dict[str, str]:
        """The process is up (it checks nothing else)."""
        return {"status": "ok"}

    @app.get("/readyz", responses={503: {"model": Problem}})
    async def readyz(rt: Rt) -> JSONResponse:
        """The database and the queue are reachable."""
        checks: dict[str, str] = {}
        try:
            await rt.db.ping()
            checks["database"] = "ok"
        except errors.TaskleaseError as exc:
            checks["database"] = f"unreachable: {exc}"
        try:
            await rt.sqs.depth(rt.settings.queue)
            checks["queue"] = "ok"
        except errors.TaskleaseError as exc:
            checks["queue"] = f"unreachable: {exc}"
        ready = all(v == "ok" for v in checks.values())
        return JSONResponse(
            {"status": "ready" if ready else "not ready", **checks},
            status_code=200 if ready else 503,
        )

    return app
