"""/v1/callbacks/{token}: answering a job's callback, and its heartbeat.

The token is the credential of these two routes (like Step Functions' task tokens): they
take no API key, and the deployment routes them past any API Gateway authorizer
(infra/apigateway.tf). A token is unguessable (an HMAC of the server secret) and only its
hash is stored; an unknown token and an expired one get the same 404, so the answer tells
a caller nothing it did not already know.

``POST /v1/jobs/{job_id}/callbacks/{key}`` answers the same callback with the caller's API
key instead (the web view's Approve and Reject: a page never sees a token), tenant-scoped
like every job route: another tenant's job is 404."""

from __future__ import annotations

import uuid
from typing import Annotated

from fastapi import APIRouter, Path

from app.api.callback_schemas import CallbackAnswer, CallbackAnswered, CallbackHeartbeat
from app.api.deps import Db, JobQueue
from app.api.errors import CONFLICT, OPEN
from app.api.security import Caller
from app.services import callbacks, jobs

router = APIRouter()

Token = Annotated[
    str,
    Path(
        max_length=callbacks.MAX_TOKEN_CHARS,
        description="the callback's token, as the job's notify handed it out",
    ),
]


@router.post("/v1/callbacks/{token}", response_model=CallbackAnswered, responses=OPEN)
async def answer_callback(
    token: Token, body: CallbackAnswer, db: Db, queue: JobQueue
) -> CallbackAnswered:
    """Answer the callback: ``{"result": <any JSON>}`` completes it, ``{"error": "..."}``
    fails it (the kind's code gets CallbackFailed). The first answer before the deadline
    wins and wakes the job; a second answer is 409; an unknown or expired token is 404."""
    return await _answer(token, body, db, queue)


CallbackKey = Annotated[
    str, Path(min_length=1, max_length=200, description="the callback's key, as the job named it")
]


@router.post(
    "/v1/jobs/{job_id}/callbacks/{key}", response_model=CallbackAnswered, responses=CONFLICT
)
async def answer_job_callback(
    job_id: uuid.UUID,
    key: CallbackKey,
    body: CallbackAnswer,
    caller: Caller,
    db: Db,
    queue: JobQueue,
) -> CallbackAnswered:
    """Answer the job's callback ``key`` with an API key (as ``POST /v1/callbacks/{token}``
    does with its token; the same body and answers): another tenant's job and an unknown
    key are 404, an answered callback 409."""
    await jobs.find(db, job_id, scope=caller.scope)
    return await _answer(await callbacks.token_for(db, job_id, key), body, db, queue)


async def _answer(token: str, body: CallbackAnswer, db: Db, queue: JobQueue) -> CallbackAnswered:
    done = await callbacks.answer(
        db,
        queue,
        token,
        result=body.result,
        error=body.error if "error" in body.model_fields_set else None,
    )
    return CallbackAnswered(
        job_id=uuid.UUID(done.job_id),
        key=done.key,
        callback_state=done.callback_state,
        job_woken=done.job_woken,
        state=done.callback_state,
        woken=done.job_woken,
    )


@router.post("/v1/callbacks/{token}/heartbeat", response_model=CallbackHeartbeat, responses=OPEN)
async def heartbeat_callback(token: Token, db: Db) -> CallbackHeartbeat:
    """Push the callback's deadline by its timeout (the party is still working on it).
    409 once it was answered; 404 for an unknown or expired token."""
    return CallbackHeartbeat(deadline=await callbacks.heartbeat(db, token))
