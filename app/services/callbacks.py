"""Answering a job's callback: the token is the credential (like Step Functions' task
tokens); only its SHA-256 is stored. The first answer before the deadline wins and wakes
the job in the same transaction; a second answer is a Conflict; an unknown or expired
token is NotFound (the two are not told apart: the token proves nothing else)."""

from __future__ import annotations

import base64
import datetime as dt
import hashlib
import logging
import uuid
from dataclasses import dataclass
from typing import Any, Literal, NoReturn

from app import crashpoints, errors, store
from app.services import outbox, server_secret
from app.transport import Transport

log = logging.getLogger(__name__)

MAX_TOKEN_CHARS = 200
MAX_ERROR_CHARS = 2000
# The key callback tokens are derived with (an HMAC of the server secret and this label).
CALLBACK_TOKEN = b"tasklease/callback-token/v1"
TOKEN_PREFIX = "tlcb_"  # noqa: S105 - a prefix, not a secret


async def token_for(db: store.Database, job_id: uuid.UUID, key: str) -> str:
    """The token of a job's callback ``key``: derived, never stored (HMAC of the server
    secret, the job id and the key), so a notify that must run again hands out the same
    token, and an operator's CLI can derive it. Only its hash is kept."""
    secrets = await server_secret.of(db).load(db)
    mac = server_secret.derive(secrets.key(CALLBACK_TOKEN), f"{job_id}:{key}".encode())
    return TOKEN_PREFIX + base64.urlsafe_b64encode(mac).rstrip(b"=").decode()


def token_hash(token: str) -> bytes:
    """What the callbacks table keeps of a token."""
    return hashlib.sha256(token.encode()).digest()


def _checked(token: str) -> bytes:
    if not token or len(token) > MAX_TOKEN_CHARS or not token.isascii():
        raise errors.NotFound("no such callback, or it is past its deadline")
    return token_hash(token)


@dataclass(frozen=True)
class Answered:
    job_id: str
    key: str
    callback_state: Literal[
        "succeeded", "failed"
    ]  # the callback's: succeeded or failed (not the job's)
    job_woken: bool  # the answer woke the job (it was waiting on this callback)


async def answer(
    db: store.Database,
    queue: Transport,
    token: str,
    *,
    result: Any = None,
    error: str | None = None,
) -> Answered:
    """Complete the callback with ``result``, or fail it with ``error``."""
    if error is not None and (not isinstance(error, str) or not error.strip()):
        raise errors.BadRequest("error must be a non-empty string")
    digest = _checked(token)
    state: Literal["succeeded", "failed"] = "failed" if error is not None else "succeeded"
    done = await store.waits.answer_callback(
        db, digest, state=state, result=result, error=error[:MAX_ERROR_CHARS] if error else None
    )
    if done is None:
        await _refused(db, digest)
    fields = {"job_id": done.job_id, "callback": done.key, "state": state}
    log.info("callback answered", extra=fields)
    crashpoints.hit(crashpoints.Point.AFTER_CALLBACK_ANSWER, **fields)
    if done.woken:
        attrs = {"callback.key": done.key, "callback.state": state}
        await outbox.send_wake_up(
            db, queue, done.job_id, path="callback", span="job.wake callback", attributes=attrs
        )
    return Answered(str(done.job_id), done.key, state, done.woken)


async def heartbeat(db: store.Database, token: str) -> dt.datetime:
    """Push a pending callback's deadline by its timeout; the new deadline."""
    deadline = await store.waits.heartbeat_callback(db, _checked(token))
    if deadline is None:
        await _refused(db, _checked(token))
    return deadline


# An answer or a heartbeat refused: answered already is a Conflict (409); unknown or past
# its deadline (timed out by the job's code or not yet) is NotFound (404), like the issue
# says of an expired token.
ANSWERED = ("succeeded", "failed")


async def _refused(db: store.Database, digest: bytes) -> NoReturn:
    found = await store.waits.callback_by_token(db, digest)
    if found is not None and found[0].state in ANSWERED:
        raise errors.Conflict(f"callback already answered ({found[0].state})")
    raise errors.NotFound("no such callback, or it is past its deadline")
