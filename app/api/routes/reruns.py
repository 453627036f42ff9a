"""/v1/jobs/{id}/rerun and /fork: a finished job again as a new job, whole or from a step
(app/services/reruns.py). A caller reaches its own tenant's jobs; another's is 404."""

from __future__ import annotations

import uuid
from typing import Annotated

from fastapi import APIRouter, Header, Response

from app.api.deps import Clients
from app.api.errors import SUBMIT
from app.api.rerun_schemas import ForkPublic, ForkRequest, RerunRequest
from app.api.schemas import JobPublic
from app.api.security import Caller
from app.services import auth, reruns
from app.services import submit as service

router = APIRouter()


def _by(caller: auth.Principal) -> str:
    return f"key {caller.key_id}" if caller.key_id else f"a caller of tenant {caller.tenant}"


# As a submission's: a retried POST answers the job the first one made (Idempotent-Replayed).
IdempotencyKey = Annotated[str | None, Header(min_length=1, max_length=service.MAX_IDEMPOTENCY_KEY)]


def _replayed(response: Response, made: service.Submitted) -> None:
    response.headers["Location"] = f"/v1/jobs/{made.job['id']}"
    if not made.created:
        response.headers["Idempotent-Replayed"] = "true"


def _payload(body: RerunRequest | None) -> object:
    return reruns.UNSET if body is None or body.payload is None else body.payload


@router.post("/v1/jobs/{job_id}/rerun", status_code=202, response_model=JobPublic, responses=SUBMIT)
async def rerun_job(
    job_id: uuid.UUID,
    caller: Caller,
    rt: Clients,
    response: Response,
    body: RerunRequest | None = None,
    idempotency_key: IdempotencyKey = None,
) -> JobPublic:
    """Re-run a finished job (succeeded, dead_lettered, cancelled) as a new job of its
    kind, with its payload or ``payload`` (validated as a submission's: 422 naming what
    is wrong). The new job has ``rerun_of``; the original lists it under ``reruns``. It
    is admitted like a submission (the original tenant's limits: 429) and sent at once.
    An unfinished job is 409. With an ``Idempotency-Key``, a retried request answers the
    re-run the first one made; the key is bound to the original job and the payload."""
    made = await reruns.rerun(
        rt.settings,
        rt.db,
        rt.queue,
        job_id,
        scope=caller.scope,
        payload=_payload(body),
        sender=rt.sender,
        key_id=caller.key_id,
        by=_by(caller),
        idempotency_key=idempotency_key,
    )
    _replayed(response, made)
    return JobPublic.of(made.job)


@router.post("/v1/jobs/{job_id}/fork", status_code=202, response_model=ForkPublic, responses=SUBMIT)
async def fork_job(
    job_id: uuid.UUID,
    body: ForkRequest,
    caller: Caller,
    rt: Clients,
    response: Response,
    idempotency_key: IdempotencyKey = None,
) -> ForkPublic:
    """Fork a finished job from ``step`` (one of its effect keys): a new job that inherits,
    copied, the effects recorded before that step, and runs from it (the inherited steps'
    code is not run again: a model call is not paid for twice). Without ``step``: every
    effect it recorded, so the new job runs from the step it failed in. 404 naming the step when
    the job did not record it; 409 for an unfinished job, or when the fork would inherit a
    step tied to the original's children or callbacks (spawn, gather, callback, notify).
    With an ``Idempotency-Key``, a retried request answers the fork the first one made."""
    forked = await reruns.fork(
        rt.settings,
        rt.db,
        rt.queue,
        job_id,
        step=body.step,
        scope=caller.scope,
        payload=_payload(body),
        sender=rt.sender,
        key_id=caller.key_id,
        by=_by(caller),
        idempotency_key=idempotency_key,
    )
    job = forked.submitted.job
    _replayed(response, forked.submitted)
    return ForkPublic.model_validate({**ForkPublic.fields_of(job), "inherited": forked.inherited})
