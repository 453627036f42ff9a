"""GET /v1/kinds: the job kinds this deployment runs (TASKLEASE_KINDS), each with its
payload's JSON schema, its result's, its timeout and its attempt budget, so a caller can
see what it may submit. Any valid key may read it: it lists code, not data."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter
from pydantic import BaseModel, Field

from app import kinds
from app.api.deps import Settings
from app.api.errors import COMMON
from app.api.security import Caller

router = APIRouter()


class KindPublic(BaseModel):
    name: str
    description: str
    timeout_seconds: int = Field(
        description="the kind's own, else the deployment's TASKLEASE_DEFAULT_JOB_TIMEOUT_SECONDS"
    )
    max_attempts: int = Field(
        description="the kind's own, else the deployment's TASKLEASE_MAX_ATTEMPTS"
    )
    payload_schema: dict[str, Any] = Field(description="JSON Schema of the payload it accepts")
    result_schema: dict[str, Any] = Field(description="JSON Schema of the result it returns")


class KindList(BaseModel):
    kinds: list[KindPublic] = Field(description="by name; empty when TASKLEASE_KINDS names none")


@router.get("/v1/kinds", response_model=KindList, responses={**COMMON})
async def list_kinds(caller: Caller, settings: Settings) -> KindList:
    """The job kinds this deployment runs, by name."""
    return KindList(
        kinds=[
            KindPublic(
                name=k.name,
                description=k.description,
                timeout_seconds=k.timeout_seconds or settings.default_job_timeout_seconds,
                max_attempts=k.max_attempts or settings.max_attempts,
                payload_schema=k.payload.model_json_schema(),
                result_schema=k.result.json_schema(),
            )
            for _, k in sorted(kinds.REGISTRY.items())
        ]
    )
