"""Streams and the overview: a job's transitions, progress and output as they happen
(``GET /v1/jobs/{id}/stream``), every job of the caller's tenant
(``GET /v1/stream``), and the counts the web view's overview shows (``GET /v1/overview``).

A stream route answers Server-Sent Events, resumable with ``Last-Event-ID``; with
``?after=<event id>`` (``0``: from the start), or behind API Gateway and Lambda (which
cannot stream a response from Python), it answers a long poll instead: the events after
that id, waiting up to ``wait`` seconds for one, and the id to ask after next.
"""

from __future__ import annotations

import datetime as dt
import json
import uuid
from collections.abc import AsyncIterator
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Header, Query, Request
from pydantic import BaseModel
from sse_starlette import EventSourceResponse

from app.api.deps import Db, JobQueue, Runtime
from app.api.errors import COMMON
from app.api.schemas import Problem
from app.api.security import Caller, TenantScope
from app.services import jobs
from app.services import streams as service
from app.store.streams import START, StreamEvent

router = APIRouter()

# A comment line this often keeps proxies from closing a quiet stream.
PING_SECONDS = 15
EventType = Literal["transition", "progress", "output", "chunk", "state"]


class StreamEventPublic(BaseModel):
    id: str  # the event id: resume after it (Last-Event-ID, or ?after=)
    type: EventType
    job_id: uuid.UUID
    tenant: str
    kind: str
    at: dt.datetime
    attempt: int
    # transition: from_state, to_state, worker, detail; progress: fraction, note;
    # output: what the kind emitted; chunk: key, seq, text (a streamed model answer);
    # state: key, value, version (ctx.set_state changed a key: GET /v1/jobs/{id}/state).
    data: Any

    @classmethod
    def of(cls, e: StreamEvent) -> StreamEventPublic:
        data = e.data
        if e.type == "chunk":
            data = {"key": e.key, "seq": e.seq, **(data if isinstance(data, dict) else {})}
        return cls(
            id=str(e.position),
            type=e.type,  # type: ignore[arg-type]
            job_id=e.job_id,
            tenant=e.tenant,
            kind=e.kind,
            at=e.at,
            attempt=e.attempt,
            data=data,
        )


class StreamPage(BaseModel):
    events: list[StreamEventPublic]
    next: str  # ask with ?after=<next> for what follows
    done: bool  # a job stream: the job is finished and every event was read


class Overview(BaseModel):
    counts: dict[str, int]  # jobs by state
    oldest_queued_seconds: float | None
    dead_letter_queue: dict[str, int] | None  # the DLQ's depth (admin keys only)


AfterQuery = Annotated[
    str | None,
    Query(
        max_length=41,
        description="answer a long poll: the events after this event id (0: from the start)",
    ),
]
WaitQuery = Annotated[
    float,
    Query(ge=0, le=service.MAX_WAIT_SECONDS, description="long poll: seconds to wait for one"),
]
LastEventId = Annotated[str | None, Header(alias="Last-Event-ID", max_length=41)]


def _hub(request: Request) -> service.Hub | None:
    runtime: Runtime = request.app.state.runtime
    return runtime.stream_hub()


def _long_poll(request: Request, after: str | None) -> bool:
    runtime: Runtime = request.app.state.runtime
    return after is not None or not runtime.streaming


def _sse(events: AsyncIterator[dict[str, Any]]) -> EventSourceResponse:
    return EventSourceResponse(events, ping=PING_SECONDS, headers={"Cache-Control": "no-store"})


def _frame(event: StreamEvent) -> dict[str, Any]:
    public = StreamEventPublic.of(event)
    return {"id": public.id, "event": public.type, "data": public.model_dump_json()}


@router.get(
    "/v1/jobs/{job_id}/stream",
    response_model=StreamPage,
    responses={
        **COMMON,
        200: {
            "description": "text/event-stream (events: transition, progress, output, chunk, "
            "state, and end once the job is finished), or with ?after= a long poll's page",
            "content": {"text/event-stream": {}},
        },
    },
)
async def stream_job(
    job_id: uuid.UUID,
    request: Request,
    caller: Caller,
    db: Db,
    after: AfterQuery = None,
    wait: WaitQuery = 20.0,
    last_event_id: LastEventId = None,
) -> Any:
    """The job's transitions, progress and output, from its start (or after
    ``Last-Event-ID``), as they happen; an ``end`` event once the job is finished and
    everything was sent. Another tenant's job is 404."""
    await jobs.find(db, job_id, scope=caller.scope)
    hub = _hub(request)
    if _long_poll(request, after):
        start = service.parse_position(after, "after") or START
        page = await service.poll(db, hub, job_id=job_id, tenant=None, after=start, wait=wait)
        return StreamPage(
            events=[StreamEventPublic.of(e) for e in page.events],
            next=str(page.next),
            done=page.done,
        )
    start = service.parse_position(last_event_id, "Last-Event-ID") or START

    async def events() -> AsyncIterator[dict[str, Any]]:
        async for event in service.follow_job(db, hub, job_id, start):
            if event is None:
                state = await jobs.find(db, job_id, scope=caller.scope)
                yield {"event": "end", "data": json.dumps({"state": state.state.value})}
                return
            yield _frame(event)

    return _sse(events())


@router.get(
    "/v1/stream",
    response_model=StreamPage,
    responses={
        403: {"model": Problem, "description": "a tenant key naming another tenant"},
        **COMMON,
        200: {
            "description": "text/event-stream of every job's events, or a long poll's page",
            "content": {"text/event-stream": {}},
        },
    },
)
async def stream_all(
    request: Request,
    db: Db,
    scope: TenantScope,
    after: AfterQuery = None,
    wait: WaitQuery = 20.0,
    last_event_id: LastEventId = None,
) -> Any:
    """Every event of the caller's tenant's jobs (an admin key: every tenant's, or
    ``tenant``'s) from now (or after ``Last-Event-ID``), as they happen."""
    hub = _hub(request)
    if _long_poll(request, after):
        start = service.parse_position(after, "after")
        if start is None or start == START:
            start = await service.start_of_all(db)
        page = await service.poll(db, hub, job_id=None, tenant=scope, after=start, wait=wait)
        return StreamPage(
            events=[StreamEventPublic.of(e) for e in page.events],
            next=str(page.next),
            done=False,
        )
    begin = service.parse_position(last_event_id, "Last-Event-ID")
    # 0 means now here, as for ?after=: a tenant's stream never replays its history.
    start = begin if begin not in (None, START) else await service.start_of_all(db)

    async def events() -> AsyncIterator[dict[str, Any]]:
        # The first frame says where the stream begins, so a reader that reconnects
        # before any job moved still resumes without a gap.
        yield {"id": str(start), "event": "open", "data": json.dumps({"at": str(start)})}
        async for event in service.follow_all(db, hub, scope, start):
            yield _frame(event)

    return _sse(events())


@router.get(
    "/v1/overview",
    response_model=Overview,
    responses={
        403: {"model": Problem, "description": "a tenant key naming another tenant"},
        **COMMON,
    },
)
async def overview(caller: Caller, db: Db, queue: JobQueue, scope: TenantScope) -> Overview:
    """Jobs by state and the oldest queued job's age, for the caller's tenant (an admin
    key: every tenant, or ``tenant``); an admin also sees the dead-letter queue's depth."""
    found = await service.overview(db, scope)
    return Overview(
        counts=found.counts,
        oldest_queued_seconds=found.oldest_queued_seconds,
        dead_letter_queue=await queue.dead_letter_depth() if caller.admin else None,
    )
