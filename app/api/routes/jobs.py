"""/v1/jobs: submit jobs (one, or a batch), read them, their events and effects, cancel
and redrive one. A caller sees its own tenant's jobs; another tenant's job is 404."""

from __future__ import annotations

import contextlib
import datetime as dt
import uuid
from contextlib import AbstractContextManager
from typing import Annotated, Any

from fastapi import APIRouter, Header, Query, Request, Response
from opentelemetry.trace import Span

from app import tracing
from app.api.callback_schemas import CallbackPublic
from app.api.deps import Db, JobQueue, Settings
from app.api.errors import COMMON, CONFLICT, SUBMIT
from app.api.schemas import (
    EffectPublic,
    EventPublic,
    JobBatchCreate,
    JobBatchPublic,
    JobCreate,
    JobDetail,
    JobPage,
    JobPublic,
    Problem,
    Storable,
)
from app.api.security import (
    SUBMIT_SECURITY,
    Caller,
    Submitter,
    TenantScope,
    verify_deferred,
)
from app.services import auth, costs, filters, jobs, redrive, reruns
from app.services import submit as service
from app.settings import bounds
from app.states import JobState

router = APIRouter()


# A single submission's answers beside 202: flow control by key (docs/howto/flow-control.md).
SUBMIT_ONE: dict[int | str, dict[str, Any]] = {
    **SUBMIT,
    200: {
        "model": JobPublic,
        "description": "if_active drop_new with a job of the key active: nothing written, the "
        "answer is the active job, with the header Tasklease-Key-Decision: dropped",
        "headers": {
            "Tasklease-Key-Decision": {
                "description": "dropped: the key's active job answered instead of a new one",
                "schema": {"type": "string", "enum": ["dropped"]},
            }
        },
    },
    409: {
        "model": Problem,
        "description": "the Idempotency-Key used before with another body; or if_active "
        "reject with a job of the key active (the detail names it)",
    },
}


@router.post(
    "/v1/jobs",
    status_code=202,
    response_model=JobPublic,
    responses=SUBMIT_ONE,
    openapi_extra=SUBMIT_SECURITY,
)
async def create_job(
    body: JobCreate,
    submitting: Submitter,
    request: Request,
    response: Response,
    idempotency_key: Annotated[
        str | None, Header(min_length=1, max_length=service.MAX_IDEMPOTENCY_KEY)
    ] = None,
) -> JobPublic:
    """Accept a job: it is durable when this answers 202, and runs later. The job
    belongs to the caller's tenant; so does its Idempotency-Key. With ``run_at`` or
    ``delay_seconds`` it is ``waiting`` on a timer until then (any length up to a year);
    when it runs is part of what its Idempotency-Key is bound to. The job's trace starts
    here (in the caller's, when it sent a ``traceparent`` header)."""
    caller, rt = submitting.caller, submitting.runtime
    try:
        with _submit_span("/v1/jobs", request, caller.tenant, 1):
            submitted = await service.submit(
                rt.settings,
                rt.db,
                rt.queue,
                kind=body.kind,
                payload=body.payload,
                max_attempts=body.max_attempts,
                timeout_seconds=body.timeout_seconds,
                idempotency_key=idempotency_key,
                tenant=caller.tenant,
                sender=rt.sender,
                key_id=caller.key_id,
                run_at=body.run_at,
                delay_seconds=body.delay_seconds,
                priority=body.priority.value,
                deadline=body.deadline,
                deadline_seconds=body.deadline_seconds,
                key=body.key,
                if_active=body.if_active,
            )
    except Exception:
        await verify_deferred(request)  # 401 first for a key revoked meanwhile
        raise
    response.headers["Location"] = f"/v1/jobs/{submitted.job['id']}"
    if submitted.dropped:
        # Its key's active job answers (if_active drop_new): nothing was written.
        response.status_code = 200
        response.headers["Tasklease-Key-Decision"] = "dropped"
    elif not submitted.created:
        response.headers["Idempotent-Replayed"] = "true"
    return JobPublic.of(submitted.job)


def _submit_span(
    route: str, request: Request, tenant: str, count: int
) -> AbstractContextManager[Span | None]:
    """The submission's span in the request's trace: every job it writes keeps its
    context, so the job's trace starts here (in the caller's, from its traceparent).
    With tracing off and no ``traceparent`` sent, none: the no-op span would record
    nothing and carry no context, so the jobs keep none either way (``of_job`` names
    their trace), and the request saves reading its headers into a propagator."""
    if not tracing.enabled() and "traceparent" not in request.headers:
        return contextlib.nullcontext()
    return tracing.request_span(
        "job.submit", f"POST {route}", request.headers, **{"job.tenant": tenant, "job.count": count}
    )


@router.post(
    "/v1/jobs/batch",
    status_code=202,
    response_model=JobBatchPublic,
    responses=SUBMIT,
    openapi_extra=SUBMIT_SECURITY,
)
async def create_jobs(
    body: JobBatchCreate, submitting: Submitter, request: Request
) -> JobBatchPublic:
    """Accept up to 100 jobs in one request, all or none: every job is durable when
    this answers 202. One bad job (422 naming ``jobs[i]``), a reused key with another
    body (409) or a limit (429, counting every new job) refuses the whole batch and
    writes nothing. The jobs' traces start here, in one trace (the caller's, when it
    sent a ``traceparent`` header)."""
    caller, rt = submitting.caller, submitting.runtime
    try:
        with _submit_span("/v1/jobs/batch", request, caller.tenant, len(body.jobs)):
            submitted = await service.submit_many(
                rt.settings,
                rt.db,
                rt.queue,
                [j.new_job() for j in body.jobs],
                tenant=caller.tenant,
                sender=rt.sender,
                key_id=caller.key_id,
            )
    except Exception:
        await verify_deferred(request)  # 401 first for a key revoked meanwhile
        raise
    return JobBatchPublic(
        jobs=[JobPublic.of(s.job) for s in submitted],
        replayed=[i for i, s in enumerate(submitted) if not s.created and not s.dropped],
        dropped=[i for i, s in enumerate(submitted) if s.dropped],
    )


@router.get(
    "/v1/jobs",
    response_model=JobPage,
    responses={
        403: {"model": Problem, "description": "a tenant key naming another tenant"},
        **COMMON,
    },
)
async def list_jobs(
    db: Db,
    scope: TenantScope,
    request: Request,
    state: Annotated[
        list[JobState] | None, Query(description="one state, or several (repeat the parameter)")
    ] = None,
    kind: Annotated[str | None, Query(max_length=100), Storable] = None,
    id: Annotated[
        str | None, Query(max_length=36, description="a job id, or its first hex digits")
    ] = None,
    idempotency_key: Annotated[str | None, Query(max_length=200), Storable] = None,
    key: Annotated[
        str | None,
        Query(
            max_length=200,
            description="the jobs of this flow-control key (docs/howto/flow-control.md), of "
            "any kind unless kind is given",
        ),
        Storable,
    ] = None,
    created_after: dt.datetime | None = None,
    created_before: dt.datetime | None = None,
    finished_after: dt.datetime | None = None,
    finished_before: dt.datetime | None = None,
    error: Annotated[
        str | None,
        Query(max_length=200, description="last_error contains this (any case)"),
        Storable,
    ] = None,
    limit: Annotated[int, Query(ge=1, le=bounds.MAX_PAGE)] = 50,
    cursor: Annotated[str | None, Query(max_length=200)] = None,
) -> JobPage:
    """The caller's jobs, newest first (an admin key: every tenant's, or ``tenant``'s),
    found by any of: id or id prefix, idempotency key, flow-control ``key``, kind,
    states, created and finished time ranges, text in the last error, and payload fields:
    ``payload.user_id=u-42`` (equal to that text) or ``payload_json.n=3`` (equal to that
    JSON value). A tenant key naming another tenant is 403. A cursor this API did not
    return for this search is 422, as is any other bad parameter (naming it); an empty
    parameter (``kind=``) is ignored."""
    flt = filters.parse(
        {
            "states": state or None,
            "kind": kind or None,
            "id_prefix": id or None,
            "idempotency_key": idempotency_key or None,
            "key": key or None,
            "created_after": created_after,
            "created_before": created_before,
            "finished_after": finished_after,
            "finished_before": finished_before,
            "error": error or None,
            "payload": filters.payload_fields(request.query_params.multi_items()),
        }
    )
    rows, next_cursor = await jobs.search(db, flt, limit=limit, cursor=cursor, scope=scope)
    return JobPage(items=[JobPublic.of(r) for r in rows], next_cursor=next_cursor)


@router.get("/v1/jobs/{job_id}", response_model=JobDetail, responses=COMMON)
async def get_job(job_id: uuid.UUID, caller: Caller, db: Db, settings: Settings) -> JobDetail:
    """The job, what it waits for while ``waiting``, its parent and its children (the
    first 100, oldest first, and how many in all), its model calls' tokens and cost, and
    the jobs re-run or forked from it (``reruns``; its own origin: ``rerun_of``,
    ``forked_from`` and ``fork_step``); a keyed job's ``key_status``: its key's limits,
    the key's other jobs and whether it waits for its key."""
    job = await jobs.get_job(db, job_id, scope=caller.scope)
    children, count = await jobs.children(db, job_id, scope=caller.scope)
    usage = await costs.of_job(settings, db, job_id)
    made = await reruns.reruns_of(db, job_id, scope=caller.scope)
    key = await jobs.key_status(db, job)
    return JobDetail.with_children(job, children, count, usage, made, key)


@router.get("/v1/jobs/{job_id}/events", response_model=list[EventPublic], responses=COMMON)
async def get_events(job_id: uuid.UUID, caller: Caller, db: Db) -> list[EventPublic]:
    events = await jobs.events(db, job_id, scope=caller.scope)
    return [EventPublic.model_validate(e) for e in events]


@router.get("/v1/jobs/{job_id}/effects", response_model=list[EffectPublic], responses=COMMON)
async def get_effects(job_id: uuid.UUID, caller: Caller, db: Db) -> list[EffectPublic]:
    effects = await jobs.effects(db, job_id, scope=caller.scope)
    return [EffectPublic.model_validate(e) for e in effects]


@router.get("/v1/jobs/{job_id}/callbacks", response_model=list[CallbackPublic], responses=COMMON)
async def get_callbacks(job_id: uuid.UUID, caller: Caller, db: Db) -> list[CallbackPublic]:
    """The job's callbacks, oldest first: key, state, deadline, heartbeats, the answer.
    Never a token: the party that answers got it from the job's notify."""
    found = await jobs.callbacks(db, job_id, scope=caller.scope)
    return [CallbackPublic.model_validate(c) for c in found]


@router.post("/v1/jobs/{job_id}/cancel", response_model=JobPublic, responses=CONFLICT)
async def cancel_job(job_id: uuid.UUID, caller: Caller, db: Db) -> JobPublic:
    """Cancel: at once when the job waits; a running job's worker is notified and stops
    it, its model call included, within moments (at its next heartbeat at the latest;
    ``cancel_requested`` is true until then). A finished job is 409."""
    return JobPublic.of(await jobs.cancel(db, job_id, scope=caller.scope))


@router.post(
    "/v1/jobs/{job_id}/redrive",
    response_model=JobPublic,
    status_code=202,
    responses={403: {"model": Problem, "description": "force needs an admin key"}, **CONFLICT},
)
async def redrive_job(
    job_id: uuid.UUID,
    caller: Caller,
    settings: Settings,
    db: Db,
    queue: JobQueue,
    force: Annotated[
        bool, Query(description="admin keys only: redrive past the job's redrive budget")
    ] = False,
) -> JobPublic:
    """Send a dead-lettered job back to the queue with a fresh attempt budget. A job
    redriven TASKLEASE_REDRIVE_BUDGET times within TASKLEASE_REDRIVE_WINDOW_SECONDS is
    409 (its redrive budget is used up) unless an admin key asks with ``force=true``."""
    if force and not caller.admin:
        raise auth.Forbidden("force=true needs an admin key")
    return JobPublic.of(
        await redrive.redrive_job(settings, db, queue, job_id, scope=caller.scope, force=force)
    )
