"""Errors as HTTP answers, in one place: which status each of the app's errors is, how a
request that does not validate is told what is wrong, and what the OpenAPI document
says each route may answer. Routes raise; nothing else builds an error answer (apart
from app/api/middleware.py's answers about the body itself, 413, 415, a repeated key's
400 and a too deep body's 422, given before FastAPI sees the request).
"""

from __future__ import annotations

import logging
import re
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse

from app import errors
from app.api import security
from app.api.schemas import MAX_ATTEMPTS, TIMEOUT_SECONDS, Problem
from app.services import auth, redrive
from app.settings import bounds

log = logging.getLogger(__name__)

STATUS: dict[type[errors.TaskleaseError], int] = {
    errors.BadRequest: 422,
    errors.NotFound: 404,
    errors.Conflict: 409,
    errors.TooManyRequests: 429,
    auth.Unauthorized: 401,
    auth.Forbidden: 403,
    errors.StoreError: 503,
    errors.QueueError: 503,
}

# What the OpenAPI document lists for the routes (FastAPI's own 422 schema replaced).
COMMON: dict[int | str, dict[str, Any]] = {
    400: {
        "model": Problem,
        "description": "ambiguous credentials (more than one Authorization header); "
        "a body that is not JSON or repeats a key",
    },
    401: {"model": Problem, "description": "no valid API key"},
    404: {"model": Problem},
    413: {"model": Problem, "description": "the body is over TASKLEASE_MAX_BODY_BYTES"},
    415: {
        "model": Problem,
        "description": "a body that is compressed (Content-Encoding) or not application/json",
    },
    422: {"model": Problem},
    429: {"model": Problem, "description": "too many failed API key checks"},
    503: {"model": Problem},
}
UNPARSEABLE: dict[int | str, dict[str, Any]] = {
    400: {"model": Problem, "description": "the body is not valid JSON or repeats a key"}
}
SUBMIT: dict[int | str, dict[str, Any]] = {
    **UNPARSEABLE,
    409: {"model": Problem},
    **COMMON,
    429: {
        "model": Problem,
        "description": "over the tenant's rate or in-flight limit; too many failed API key checks",
    },
}
CONFLICT: dict[int | str, dict[str, Any]] = {409: {"model": Problem}, **COMMON}
# The callback routes: the token is the credential, so no 401 (nor the key throttle's 429).
OPEN: dict[int | str, dict[str, Any]] = {
    **UNPARSEABLE,
    404: {"model": Problem, "description": "no such callback, or it is past its deadline"},
    409: {"model": Problem, "description": "the callback was answered already"},
    **{code: COMMON[code] for code in (413, 415, 422, 503)},
}

# Pydantic's error types for a body that is not JSON: it never reached validation.
_NOT_JSON = {"json_invalid", "json_type"}
# A batch item's field has the single job's range: body.jobs.3.max_attempts.
_BATCH_ITEM = re.compile(r"^body\.jobs\.\d+\.")
# Allowed ranges named in 422 answers (the OpenAPI document carries them too).
_RANGES: dict[str, tuple[int, int]] = {
    "body.max_attempts": MAX_ATTEMPTS,
    "body.timeout_seconds": TIMEOUT_SECONDS,
    "query.limit": (1, bounds.MAX_PAGE),
    "body.limit": (1, redrive.MAX_LIST),
    "body.delay_seconds": (0, bounds.MAX_DELAY_SECONDS),
    "body.deadline_seconds": (0, bounds.MAX_DEADLINE_SECONDS),
}


def install(app: FastAPI) -> None:
    """Answer the app's errors and invalid requests as {"detail": "..."}."""

    @app.exception_handler(errors.TaskleaseError)
    async def _error(request: Request, exc: errors.TaskleaseError) -> JSONResponse:
        status = next((code for cls, code in STATUS.items() if isinstance(exc, cls)), 500)
        if status >= 500:
            log.error("request failed: %s", exc)
        return JSONResponse({"detail": str(exc)}, status_code=status, headers=_headers(exc))

    @app.exception_handler(RequestValidationError)
    async def _invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        try:
            await security.verify_deferred(request)  # a revoked key is 401, not 422
        except errors.TaskleaseError as refused:
            return await _error(request, refused)
        status, detail = validation_message(exc)
        return JSONResponse({"detail": detail}, status_code=status)


def _headers(exc: errors.TaskleaseError) -> dict[str, str]:
    """What tells the client how to do better: the key scheme, when to retry."""
    if isinstance(exc, auth.Unauthorized):
        challenge = 'Bearer realm="tasklease"'
        if exc.error:
            challenge += f', error="{exc.error}"'
        return {"WWW-Authenticate": challenge}
    if isinstance(exc, errors.TooManyRequests):
        return {"Retry-After": str(exc.retry_after)}
    return {}


def validation_message(exc: RequestValidationError) -> tuple[int, str]:
    """The status (400 for a body that is not JSON, else 422) and one readable line
    naming each field that is wrong, with the allowed range."""
    problems = []
    status = 422
    for e in exc.errors():
        if e.get("type") in _NOT_JSON:
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
