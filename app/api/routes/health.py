"""/healthz and /readyz, for load balancers and the local stack: no key needed."""

from __future__ import annotations

from fastapi import APIRouter
from fastapi.responses import JSONResponse

from app import errors
from app.api.deps import Db, JobQueue, Settings
from app.api.schemas import Readiness

router = APIRouter()


@router.get("/healthz")
async def healthz() -> dict[str, str]:
    """The process is up (it checks nothing else)."""
    return {"status": "ok"}


@router.get(
    "/readyz",
    response_model=Readiness,
    responses={503: {"model": Readiness, "description": "not ready"}},
)
async def readyz(settings: Settings, db: Db, queue: JobQueue) -> JSONResponse:
    """The database and the queue are reachable."""
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
    ready = all(v == "ok" for v in checks.values())
    # Not the Problem shape of app/api/errors.py: a 503 here still names each check.
    return JSONResponse(
        {"status": "ready" if ready else "not ready", **checks},
        status_code=200 if ready else 503,
    )
