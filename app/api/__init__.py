"""The HTTP API (FastAPI), versioned under /v1. handlers/api.py serves it through Mangum.

Every /v1 route needs a caller: a tenant's API key (``Authorization: Bearer tlk_…``)
or, with TASKLEASE_AUTH_MODE=authorizer, the identity API Gateway's authorizer put in
the request context. A caller sees its own tenant's jobs; another tenant's job is 404.
An admin key sees every tenant (dead letters across tenants, redrive).
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import logging
import re
import uuid
from collections.abc import AsyncIterator
from typing import Annotated, Any, Literal

from fastapi import Depends, FastAPI, Header, HTTPException, Query, Request, Response
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from pydantic import AfterValidator, BaseModel, ConfigDict, Field
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app import __version__, errors, kinds
from app import aws_limits as limits
from app import config as config_mod
from app.services import auth, redrive
from app.services import submit as service
from app.states import JobState
from app.store.pool import Database
from app.transport.sqs import Queue

log = logging.getLogger(__name__)


# --- models ---------------------------------------------------------------------


def _storable(value: str | None) -> str | None:
    problem = service.unstorable(value)
    if problem:
        raise ValueError(problem)
    return value


# Free text that reaches the database: a value it cannot store is a 422, not a 500.
Storable = AfterValidator(_storable)
# A tenant as keys and the database spell it (auth.TENANT, anchored for JSON Schema).
TENANT_PATTERN = f"^(?:{auth.TENANT.pattern.removeprefix('^').removesuffix('$')})$"


class JobCreate(BaseModel):
    model_config = ConfigDict(extra="forbid")

    kind: str = Field(min_length=1, max_length=100, examples=["support.triage"])
    payload: dict[str, Any] = Field(
        examples=[{"ticket_id": "T-1", "subject": "Refund", "body": "I was charged twice."}]
    )
    max_attempts: int | None = Field(None, ge=1, le=100)
    timeout_seconds: int | None = Field(None, ge=1, le=limits.MAX_VISIBILITY_SECONDS)


class JobBatchItem(JobCreate):
    idempotency_key: str | None = Field(
        None,
        min_length=1,
        max_length=service.MAX_IDEMPOTENCY_KEY,
        description="this job's Idempotency-Key (the header's role for POST /v1/jobs)",
    )


class JobBatchCreate(BaseModel):
    model_config = ConfigDict(extra="forbid")

    jobs: list[JobBatchItem] = Field(min_length=1, max_length=service.MAX_SUBMIT_BATCH)


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


class JobBatchPublic(BaseModel):
    jobs: list[JobPublic] = Field(description="one per job asked for, in the same order")
    replayed: list[int] = Field(
        description="the positions answered by the job an earlier request made with the "
        "same idempotency_key"
    )


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


class Readiness(BaseModel):
    status: Literal["ready", "not ready"]
    database: str = Field(description='"ok", or why it is unreachable')
    queue: str = Field(description='"ok", or why it is unreachable')


class Me(BaseModel):
    tenant: str
    admin: bool
    key_id: str | None
    via: str


class RedriveRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    job_ids: list[uuid.UUID] | None = Field(None, max_length=redrive.MAX_LIST)
    kind: Annotated[str | None, Storable] = Field(None, min_length=1, max_length=100)
    tenant: str | None = Field(None, pattern=TENANT_PATTERN)
    limit: int | None = Field(None, ge=1, le=redrive.MAX_LIST)


class RedriveSummary(BaseModel):
    mode: str
    selected: int
    moved: int
    reset: int
    sent_without_dead_letter: int
    stale_deleted: int
    left_in_dlq: int


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
        self._keys: auth.KeyVerifier | None = None
        self._sender: service.OutboxSender | None = None
        self.sqs = Queue(settings)
        self._lock = asyncio.Lock()

    @property
    def db(self) -> Database:
        if self._db is None:
            raise errors.StoreError("the API's database pool is not open")
        return self._db

    @property
    def sender(self) -> service.OutboxSender:
        if self._sender is None:
            self._sender = service.OutboxSender(self.db, self.sqs)
        return self._sender

    @property
    def keys(self) -> auth.KeyVerifier:
        if self._keys is None:
            self._keys = auth.KeyVerifier(self.db)
        return self._keys

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
            self._keys = None
            self._sender = None


async def _runtime(request: Request) -> Runtime:
    rt: Runtime = request.app.state.runtime
    await rt.open()  # a no-op once open
    return rt


Rt = Annotated[Runtime, Depends(_runtime)]

# Declares the scheme in the OpenAPI document; _caller does the checking itself, so a
# missing or bad key is our 401 with WWW-Authenticate, not the library's answer.
_bearer = HTTPBearer(auto_error=False, description="A tenant's API key: tlk_<id>_<secret>")


Credentials = Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)]


async def _identify(
    request: Request, rt: Runtime, credentials: Credentials, *, defer_revocation: bool
) -> tuple[auth.Principal, str]:
    s = rt.settings
    if s.auth_mode == "authorizer":
        principal = auth.from_authorizer(
            request.scope.get("aws.event"),
            tenant_field=s.authorizer_tenant_field,
            admin_field=s.authorizer_admin_field,
        )
        return principal, ""
    # HTTPBearer hands over only a well-formed "Bearer <token>"; anything else is None.
    header = request.headers.get("authorization")
    token = credentials.credentials if credentials else auth.bearer(header)
    return await rt.keys.verify(token, defer_revocation=defer_revocation), token


async def _caller(request: Request, rt: Rt, credentials: Credentials) -> auth.Principal:
    principal, _ = await _identify(request, rt, credentials, defer_revocation=False)
    return principal


Caller = Annotated[auth.Principal, Depends(_caller)]


async def _submitter(
    request: Request, rt: Rt, credentials: Credentials
) -> AsyncIterator[auth.Principal]:
    """The caller of a submit route. A key this process verified before is taken from
    memory and its revocation is read by the insert itself (one round trip fewer per
    submission). Should the request fail before that statement ran (a body that does
    not validate, a bad job), the key is read first, so a revoked key still gets 401."""
    principal, token = await _identify(request, rt, credentials, defer_revocation=True)
    try:
        yield principal
    except Exception:
        if principal.revocation_pending:
            await rt.keys.verify(token)  # Unauthorized for a key revoked meanwhile
        raise


Submitter = Annotated[auth.Principal, Depends(_submitter)]


async def _admin(caller: Caller) -> auth.Principal:
    if not caller.admin:
        raise auth.Forbidden()
    return caller


Admin = Annotated[auth.Principal, Depends(_admin)]

STATUS = {
    errors.BadRequest: 422,
    errors.NotFound: 404,
    errors.Conflict: 409,
    errors.TooManyRequests: 429,
    auth.Unauthorized: 401,
    auth.Forbidden: 403,
    errors.StoreError: 503,
    errors.QueueError: 503,
}

# What a malformed body is answered with: it never reached validation.
_UNPARSEABLE = {"json_invalid", "json_type"}


def _validation_message(exc: RequestValidationError) -> tuple[int, str]:
    """One readable line naming each field that is wrong (and the allowed range)."""
    problems = []
    status = 422
    for e in exc.errors():
        if e.get("type") in _UNPARSEABLE:
            status = 400
            problems.append(
                f"the body is not valid JSON: {e.get('ctx', {}).get('error', e['msg'])}"
            )
            continue
        where = ".".join(str(p) for p in e.get("loc", ()))
        msg = str(e.get("msg", "invalid"))
        ctx = e.get("ctx") or {}
        bounds = _RANGES.get(_BATCH_ITEM.sub("body.", where))
        if bounds and any(k in ctx for k in ("ge", "le", "gt", "lt")):
            msg += f" (allowed: {bounds[0]} to {bounds[1]})"
        problems.append(f"{where}: {msg}")
    return status, "; ".join(problems) or "the request is invalid"


# A batch item's field has the single job's range: body.jobs.3.max_attempts.
_BATCH_ITEM = re.compile(r"^body\.jobs\.\d+\.")
# Allowed ranges named in 422 answers (the OpenAPI document carries them too).
_RANGES: dict[str, tuple[int, int]] = {
    "body.max_attempts": (1, 100),
    "body.timeout_seconds": (1, limits.MAX_VISIBILITY_SECONDS),
    "query.limit": (1, service.MAX_PAGE),
    "body.limit": (1, redrive.MAX_LIST),
}


class BodyLimit:
    """413 for a body over the limit, before anything reads it: by Content-Length when it
    is sent, and by counting as the body streams in when it is not (chunked)."""

    def __init__(self, app: ASGIApp, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        length = dict(scope.get("headers") or []).get(b"content-length")
        if length is not None:
            try:
                too_big = int(length) > self.max_bytes
            except ValueError:
                too_big = False  # the server refuses a malformed length itself
            if too_big:
                response = JSONResponse({"detail": self._detail()}, status_code=413)
                await response(scope, receive, send)
                return
        seen = 0

        async def counted() -> Message:
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > self.max_bytes:
                    # FastAPI passes an HTTPException raised while it reads the body
                    # through to the answer (any other exception becomes a 400).
                    raise HTTPException(status_code=413, detail=self._detail())
            return message

        await self.app(scope, counted, send)

    def _detail(self) -> str:
        return f"the request body is larger than {self.max_bytes} bytes (TASKLEASE_MAX_BODY_BYTES)"


def create_app(settings: config_mod.Settings | None = None) -> FastAPI:
    settings = settings or config_mod.load()
    kinds.load(settings)  # a TASKLEASE_KINDS module that does not import stops start-up
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

    app.add_middleware(BodyLimit, max_bytes=settings.max_body_bytes)

    @app.exception_handler(errors.TaskleaseError)
    async def _error(request: Request, exc: errors.TaskleaseError) -> JSONResponse:
        status = next((code for cls, code in STATUS.items() if isinstance(exc, cls)), 500)
        if status >= 500:
            log.error("request failed: %s", exc)
        headers: dict[str, str] = {}
        if isinstance(exc, auth.Unauthorized):
            challenge = 'Bearer realm="tasklease"'
            if exc.error:
                challenge += f', error="{exc.error}"'
            headers["WWW-Authenticate"] = challenge
        if isinstance(exc, errors.TooManyRequests):
            headers["Retry-After"] = str(exc.retry_after)
        return JSONResponse({"detail": str(exc)}, status_code=status, headers=headers)

    @app.exception_handler(RequestValidationError)
    async def _invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        status, detail = _validation_message(exc)
        return JSONResponse({"detail": detail}, status_code=status)

    responses: dict[int | str, dict[str, Any]] = {
        401: {"model": Problem, "description": "no valid API key"},
        404: {"model": Problem},
        413: {"model": Problem, "description": "the body is over TASKLEASE_MAX_BODY_BYTES"},
        422: {"model": Problem},
        503: {"model": Problem},
    }
    submit_responses: dict[int | str, dict[str, Any]] = {
        400: {"model": Problem, "description": "the body is not valid JSON"},
        409: {"model": Problem},
        429: {"model": Problem, "description": "over the tenant's rate or in-flight limit"},
        **responses,
    }

    @app.post(
        "/v1/jobs",
        status_code=202,
        response_model=JobPublic,
        responses=submit_responses,
    )
    async def create_job(
        body: JobCreate,
        caller: Submitter,
        rt: Rt,
        response: Response,
        idempotency_key: Annotated[
            str | None, Header(min_length=1, max_length=service.MAX_IDEMPOTENCY_KEY)
        ] = None,
    ) -> JobPublic:
        """Accept a job: it is durable when this answers 202, and runs later. The job
        belongs to the caller's tenant; so does its Idempotency-Key."""
        submitted = await service.submit(
            rt.settings,
            rt.db,
            rt.sqs,
            kind=body.kind,
            payload=body.payload,
            max_attempts=body.max_attempts,
            timeout_seconds=body.timeout_seconds,
            idempotency_key=idempotency_key,
            tenant=caller.tenant,
            sender=rt.sender,
            key_id=caller.key_id,
        )
        response.headers["Location"] = f"/v1/jobs/{submitted.job['id']}"
        if not submitted.created:
            response.headers["Idempotent-Replayed"] = "true"
        return JobPublic.of(submitted.job)

    @app.post(
        "/v1/jobs/batch",
        status_code=202,
        response_model=JobBatchPublic,
        responses=submit_responses,
    )
    async def create_jobs(body: JobBatchCreate, caller: Submitter, rt: Rt) -> JobBatchPublic:
        """Accept up to 100 jobs in one request, all or none: every job is durable when
        this answers 202. One bad job (422 naming ``jobs[i]``), a reused key with another
        body (409) or a limit (429, counting every new job) refuses the whole batch and
        writes nothing."""
        submitted = await service.submit_many(
            rt.settings,
            rt.db,
            rt.sqs,
            [
                service.NewJob(
                    kind=j.kind,
                    payload=j.payload,
                    max_attempts=j.max_attempts,
                    timeout_seconds=j.timeout_seconds,
                    idempotency_key=j.idempotency_key,
                )
                for j in body.jobs
            ],
            tenant=caller.tenant,
            sender=rt.sender,
            key_id=caller.key_id,
        )
        return JobBatchPublic(
            jobs=[JobPublic.of(s.job) for s in submitted],
            replayed=[i for i, s in enumerate(submitted) if not s.created],
        )

    @app.get("/v1/jobs", response_model=JobPage, responses={400: {"model": Problem}, **responses})
    async def list_jobs(
        caller: Caller,
        rt: Rt,
        state: JobState | None = None,
        kind: Annotated[str | None, Query(max_length=100), Storable] = None,
        limit: Annotated[int, Query(ge=1, le=service.MAX_PAGE)] = 50,
        cursor: Annotated[str | None, Query(max_length=200)] = None,
    ) -> JobPage | JSONResponse:
        """The caller's jobs, newest first (an admin key: every tenant's)."""
        try:
            rows, next_cursor = await service.list_jobs(
                rt.db, state=state, kind=kind, limit=limit, cursor=cursor, scope=caller.scope
            )
        except errors.BadRequest as exc:
            return JSONResponse({"detail": str(exc)}, status_code=400)
        return JobPage(items=[JobPublic.of(r) for r in rows], next_cursor=next_cursor)

    @app.get("/v1/jobs/{job_id}", response_model=JobPublic, responses=responses)
    async def get_job(job_id: uuid.UUID, caller: Caller, rt: Rt) -> JobPublic:
        return JobPublic.of(await service.get_job(rt.db, job_id, scope=caller.scope))

    @app.get("/v1/jobs/{job_id}/events", response_model=list[EventPublic], responses=responses)
    async def get_events(job_id: uuid.UUID, caller: Caller, rt: Rt) -> list[EventPublic]:
        events = await service.events(rt.db, job_id, scope=caller.scope)
        return [EventPublic.model_validate(e) for e in events]

    @app.get("/v1/jobs/{job_id}/effects", response_model=list[EffectPublic], responses=responses)
    async def get_effects(job_id: uuid.UUID, caller: Caller, rt: Rt) -> list[EffectPublic]:
        effects = await service.effects(rt.db, job_id, scope=caller.scope)
        return [EffectPublic.model_validate(e) for e in effects]

    conflict = {409: {"model": Problem}, **responses}

    @app.post("/v1/jobs/{job_id}/cancel", response_model=JobPublic, responses=conflict)
    async def cancel_job(job_id: uuid.UUID, caller: Caller, rt: Rt) -> JobPublic:
        """Cancel: at once when the job waits; a running job stops at its next heartbeat
        (``cancel_requested`` is true until then). A finished job is 409."""
        return JobPublic.of(await service.cancel(rt.db, job_id, scope=caller.scope))

    @app.post(
        "/v1/jobs/{job_id}/redrive", response_model=JobPublic, status_code=202, responses=conflict
    )
    async def redrive_job(job_id: uuid.UUID, caller: Caller, rt: Rt) -> JobPublic:
        """Send a dead-lettered job back to the queue with a fresh attempt budget."""
        return JobPublic.of(await redrive.redrive_job(rt.db, rt.sqs, job_id, scope=caller.scope))

    @app.get(
        "/v1/dead-letters",
        response_model=list[JobPublic],
        responses={
            403: {"model": Problem, "description": "the tenant filter needs an admin key"},
            **responses,
        },
    )
    async def dead_letters(
        caller: Caller,
        rt: Rt,
        kind: Annotated[str | None, Query(max_length=100), Storable] = None,
        tenant: Annotated[
            str | None, Query(pattern=TENANT_PATTERN, description="admin keys only")
        ] = None,
        limit: Annotated[int, Query(ge=1, le=service.MAX_PAGE)] = 50,
    ) -> list[JobPublic]:
        """Dead-lettered jobs, oldest first: kind, attempts, last error, when. The caller's
        own; an admin key sees every tenant's, or one tenant's with ``tenant``."""
        if tenant is not None and not caller.admin:
            raise auth.Forbidden("the tenant filter needs an admin key")
        scope = tenant if caller.admin else caller.tenant
        rows = await redrive.dead_letters(rt.db, scope=scope, kind=kind, limit=limit)
        return [JobPublic.of(r) for r in rows]

    @app.post(
        "/v1/dead-letters/redrive",
        response_model=RedriveSummary,
        responses={
            400: {"model": Problem, "description": "the body is not valid JSON"},
            403: {"model": Problem, "description": "not an admin key"},
            **responses,
        },
    )
    async def redrive_dead_letters(body: RedriveRequest, caller: Admin, rt: Rt) -> RedriveSummary:
        """Admin: redrive dead letters across tenants, chosen by job ids, kind, tenant and a
        limit (none of them: the whole DLQ, as `tasklease redrive` does)."""
        report = await redrive.redrive(
            rt.settings,
            rt.db,
            rt.sqs,
            job_ids=body.job_ids,
            kind=body.kind,
            tenant=body.tenant,
            limit=body.limit,
        )
        return RedriveSummary(
            mode=report.mode,
            selected=len(report.selected),
            moved=report.moved,
            reset=report.reset,
            sent_without_dead_letter=report.sent_without_dead_letter,
            stale_deleted=report.stale_deleted,
            left_in_dlq=report.left_in_dlq,
        )

    @app.get(
        "/v1/me", response_model=Me, responses={401: {"model": Problem}, 503: {"model": Problem}}
    )
    async def me(caller: Caller) -> Me:
        """Who the API takes the caller for: tenant, admin scope, key id."""
        return Me(tenant=caller.tenant, admin=caller.admin, key_id=caller.key_id, via=caller.via)

    @app.get("/healthz")
    async def healthz() -> dict[str, str]:
        """The process is up (it checks nothing else)."""
        return {"status": "ok"}

    @app.get(
        "/readyz",
        response_model=Readiness,
        responses={503: {"model": Readiness, "description": "not ready"}},
    )
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
