"""/v1/me: who the API takes the caller for."""

from __future__ import annotations

from fastapi import APIRouter

from app.api.schemas import Me, Problem
from app.api.security import Caller

router = APIRouter()


@router.get(
    "/v1/me", response_model=Me, responses={401: {"model": Problem}, 503: {"model": Problem}}
)
async def me(caller: Caller) -> Me:
    """Who the API takes the caller for: tenant, admin scope, key id."""
    return Me(tenant=caller.tenant, admin=caller.admin, key_id=caller.key_id, via=caller.via)
