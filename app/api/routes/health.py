"""/healthz and /readyz, for load balancers, uptime checks and the local stack: no key
needed. Each answers HEAD too (what uptime checkers send): the GET's status, no body."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Response
from fastapi.responses import JSONResponse

from app import errors, store
from app.api.deps import Db, JobQueue, Settings
from app.api.schemas import Readiness
from app.transport import Transport

router = APIRouter()
_NO_BODY: dict[int | str, dict[str, Any]] = {
    200: {"description": "the GET's status, without its body"}
}


@router.get("/healthz")
async def healthz() -> dict[str, str]:
    """The process is up (it checks nothing else)."""
    return {"status": "ok"}


@router.head("/healthz", response_class=Response, responses=_NO_BODY)
async def healthz_head() -> Response:
    """``GET /healthz``'s status, without a body."""
    return Response(status_code=200)


async def _readiness(db: store.Database, queue: Transport) -> tuple[bool, dict[str, str]]:
    """Whether the database and the queue answer, and what each check found."""
    checks: dict[str, str] = {}
    try:
        await db.ping()
        checks["database"] = "ok"
    except errors.TaskleaseError as exc:
        checks["database"] = f"unreachable: {exc}"
    try:
        await queue.depth()
        checks["queue"] = "ok"
    except errors.TaskleaseError as exc:
        checks["queue"] = f"unreachable: {exc}"
    return all(v == "ok" for v in checks.values()), checks


@router.get(
    "/readyz",
    response_model=Readiness,
    responses={503: {"model": Readiness, "description": "not ready"}},
)
async def readyz(settings: Settings, db: Db, queue: JobQueue) -> JSONResponse:
    """The database and the queue are reachable."""
    ready, checks = await _readiness(db, queue)
    # Not the Problem shape of app/api/errors.py: a 503 here still names each check.
    return JSONResponse(
        {"status": "ready" if ready else "not ready", **checks},
        status_code=200 if ready else 503,
    )


@router.head(
    "/readyz", response_class=Response, responses={**_NO_BODY, 503: {"description": "not ready"}}
)
async def readyz_head(db: Db, queue: JobQueue) -> Response:
    """``GET /readyz``'s status (200 ready, 503 not), without a body."""
    ready, _ = await _readiness(db, queue)
    return Response(status_code=200 if ready else 503)
