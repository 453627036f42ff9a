"""/v1/jobs/{id}/messages: a message to a job, which its code reads with
``ctx.receive(topic)``, and the list of the job's messages. Tenant-scoped like every job
route: another tenant's job is 404."""

from __future__ import annotations

import uuid
from typing import Annotated

from fastapi import APIRouter, Header, Response

from app.api.deps import Db, JobQueue
from app.api.errors import COMMON, CONFLICT
from app.api.message_schemas import MessageCreate, MessagePublic, MessageSent
from app.api.security import Caller
from app.services import messages
from app.settings import bounds

router = APIRouter()


@router.post(
    "/v1/jobs/{job_id}/messages", status_code=201, response_model=MessageSent, responses=CONFLICT
)
async def send_message(
    job_id: uuid.UUID,
    body: MessageCreate,
    caller: Caller,
    db: Db,
    queue: JobQueue,
    response: Response,
    idempotency_key: Annotated[
        str | None, Header(min_length=1, max_length=bounds.MAX_IDEMPOTENCY_KEY_CHARS)
    ] = None,
) -> MessageSent:
    """Send the job a message on ``topic``: stored when this answers 201, in order after the
    job's earlier messages on that topic, and read once by the job's
    ``ctx.receive(topic)``. A job waiting on the topic is woken in the same transaction.
    With an Idempotency-Key, a retry answers the first message (``Idempotent-Replayed:
    true``) and stores nothing; the key with another topic or body is 409. A succeeded or
    cancelled job is 409 (naming its state); a job at MAX_MESSAGES_PER_JOB messages is 409;
    a body over MAX_MESSAGE_BYTES is 422."""
    sent = await messages.send(
        db,
        queue,
        job_id,
        scope=caller.scope,
        topic=body.topic,
        body=body.body,
        idempotency_key=idempotency_key,
    )
    response.headers["Location"] = f"/v1/jobs/{job_id}/messages"
    if not sent.created:
        response.headers["Idempotent-Replayed"] = "true"
    return MessageSent(**MessagePublic.of(sent.message).model_dump(), job_woken=sent.job_woken)


@router.get("/v1/jobs/{job_id}/messages", response_model=list[MessagePublic], responses=COMMON)
async def list_messages(job_id: uuid.UUID, caller: Caller, db: Db) -> list[MessagePublic]:
    """The job's messages, oldest first (the first 200): topic, body, when sent, and when
    a receive consumed it."""
    found = await messages.of_job(db, job_id, scope=caller.scope)
    return [MessagePublic.of(m) for m in found]
