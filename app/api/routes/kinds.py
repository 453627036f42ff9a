"""GET /v1/kinds: the job kinds this deployment runs (TASKLEASE_KINDS), each with its
payload's JSON schema, its result's, its timeout and its attempt budget, so a caller can
see what it may submit; and each kind's jobs by state, from the maintained counts (never a
scan of jobs). Any valid key may read it: a tenant key's counts are its own tenant's, an
admin key's every tenant's (or ``?tenant=``'s)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter
from pydantic import BaseModel, Field

from app import kinds
from app.api.deps import Db, Settings
from app.api.errors import COMMON
from app.api.schemas import Problem
from app.api.security import TenantScope
from app.services import gauges
from app.states import JobState

router = APIRouter()

# Each kind's payload and result schemas, made once: pydantic builds them in ~4 ms a kind,
# and a kind's code does not change under a running process (--reload restarts it).
_schemas: dict[str, tuple[object, dict[str, Any], dict[str, Any]]] = {}


def _schemas_of(k: kinds.Kind[Any, Any, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    made = _schemas.get(k.name)
    if made is None or made[0] is not k:
        made = _schemas[k.name] = (k, k.payload.model_json_schema(), k.result.json_schema())
    return made[1], made[2]


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
    counts: dict[str, int] = Field(
        description="its jobs by state, every state named (0 for none): the caller's tenant's, "
        "an admin key's every tenant's or ?tenant='s"
    )
    version: str = Field(description="the version new jobs start on (the newest served)")
    versions: list[str] = Field(description="every version this deployment serves, oldest first")
    on_version_change: str = Field(
        description='"resume" or "pin": what a job started on another version does'
    )


class KindList(BaseModel):
    kinds: list[KindPublic] = Field(description="by name; empty when TASKLEASE_KINDS names none")


@router.get(
    "/v1/kinds",
    response_model=KindList,
    responses={
        403: {"model": Problem, "description": "a tenant key naming another tenant"},
        **COMMON,
    },
)
async def list_kinds(scope: TenantScope, settings: Settings, db: Db) -> KindList:
    """The job kinds this deployment runs, by name, with their jobs by state."""
    counts = await gauges.counts_by_kind(db, scope)
    return KindList(
        kinds=[
            KindPublic(
                name=k.name,
                description=k.description,
                timeout_seconds=k.timeout_seconds or settings.default_job_timeout_seconds,
                max_attempts=k.max_attempts or settings.max_attempts,
                payload_schema=payload,
                result_schema=result,
                counts={s.value: counts.get(name, {}).get(s.value, 0) for s in JobState},
                version=k.version,
                versions=kinds.REGISTRY.versions(name),
                on_version_change=k.on_version_change,
            )
            for name, k in sorted(kinds.REGISTRY.items())
            for payload, result in [_schemas_of(k)]
        ]
    )
