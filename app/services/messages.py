"""Messages to a job (``POST /v1/jobs/{id}/messages``, ``tasklease jobs send``): stored in
order per job and topic, and the job waiting on the topic woken in the same transaction
(docs/explain/design.md#messages). A finished job (succeeded, cancelled) takes none: 409
naming its state; a dead-lettered one does (a redrive brings it back to read them).
Another tenant's job is 404. An Idempotency-Key makes a retried send deliver once."""

from __future__ import annotations

import hashlib
import json
import logging
import uuid
from dataclasses import dataclass
from typing import Any

from app import crashpoints, errors, storable, store
from app.kinds.messages import check_topic
from app.services import jobs, outbox
from app.settings import bounds
from app.states import TERMINAL
from app.transport import Transport

log = logging.getLogger(__name__)

REFUSING = frozenset(str(s) for s in TERMINAL)
MAX_LISTED = 200  # messages GET /v1/jobs/{id}/messages and `jobs show` list at most


@dataclass(frozen=True)
class Sent:
    message: store.messages.Message
    created: bool  # False: the Idempotency-Key's earlier message, not stored again
    job_woken: bool  # the message woke the job (it was waiting on the topic)


def _encoded(body: Any) -> str:
    """The body as compact JSON, refused past MAX_MESSAGE_BYTES or when PostgreSQL could
    not store it."""
    problem = storable.unstorable(body)
    if problem:
        raise errors.BadRequest(f"body: {problem}")
    try:
        text = json.dumps(body, separators=(",", ":"), sort_keys=True, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise errors.BadRequest(f"body must be JSON: {exc}") from None
    size = len(text.encode())
    if size > bounds.MAX_MESSAGE_BYTES:
        raise errors.BadRequest(
            f"body is {size} bytes of JSON, over the limit of {bounds.MAX_MESSAGE_BYTES} "
            "bytes per message (MAX_MESSAGE_BYTES)"
        )
    return text


def _request_hash(topic: str, text: str) -> str:
    return hashlib.sha256(json.dumps([topic, text]).encode()).hexdigest()


def _check_key(key: str | None) -> None:
    if key is None:
        return
    if not 1 <= len(key) <= bounds.MAX_IDEMPOTENCY_KEY_CHARS or storable.unstorable(key):
        raise errors.BadRequest(
            f"Idempotency-Key must be 1 to {bounds.MAX_IDEMPOTENCY_KEY_CHARS} characters "
            "of storable text"
        )


async def send(
    db: store.Database,
    queue: Transport,
    job_id: uuid.UUID,
    *,
    scope: str | None,
    topic: str,
    body: Any,
    idempotency_key: str | None = None,
) -> Sent:
    """Send ``body`` on ``topic`` to the job (in ``scope``'s tenant; None: any)."""
    check_topic(topic)
    digest = _request_hash(topic, _encoded(body))
    _check_key(idempotency_key)
    sending = await store.messages.send(
        db,
        job_id,
        scope=scope,
        topic=topic,
        body=body,
        idempotency_key=idempotency_key,
        request_hash=digest,
        refuse_states=REFUSING,
        most=bounds.MAX_MESSAGES_PER_JOB,
    )
    if sending is None:
        raise errors.NotFound(f"no job {job_id}")
    message = sending.message
    if message is None:
        if sending.job_state in REFUSING:
            raise errors.Conflict(f"job {job_id} is {sending.job_state}: it takes no messages")
        raise errors.Conflict(
            f"job {job_id} has {sending.messages} messages, the most one job may be sent "
            f"(MAX_MESSAGES_PER_JOB = {bounds.MAX_MESSAGES_PER_JOB})"
        )
    if not sending.created:
        if message.request_hash != digest:
            raise errors.Conflict(
                f"Idempotency-Key {idempotency_key!r} was used for another message to this job"
            )
        return Sent(message, created=False, job_woken=False)
    fields = {"job_id": str(job_id), "topic": topic, "message_id": message.id}
    log.info("message sent", extra=fields)
    crashpoints.hit(crashpoints.Point.AFTER_MESSAGE_SENT, **fields)
    if sending.woken:
        attributes = {"message.topic": topic, "message.id": message.id}
        await outbox.send_wake_up(
            db, queue, job_id, path="message", span="job.wake message", attributes=attributes
        )
    return Sent(message, created=True, job_woken=sending.woken)


async def of_job(
    db: store.Database, job_id: uuid.UUID, *, scope: str | None
) -> list[store.messages.Message]:
    """The job's messages, oldest first (the first MAX_LISTED)."""
    await jobs.find(db, job_id, scope=scope)
    return await store.messages.of_job(db, job_id, limit=MAX_LISTED)
