"""GET /v1/kinds: the job kinds this deployment runs (TASKLEASE_KINDS), each with its
payload's JSON schema, its result's, its timeout, its attempt budget and its flow control
by key, so a caller can see what it may submit; and each kind's jobs by state, from the
maintained counts (never a scan of jobs). Any valid key may read it: a tenant key's counts
are its own tenant's, an admin key's every tenant's (or ``?tenant=``'s)."""

from __future__ import annotations

from typing import Any, Literal

from fastapi import APIRouter
from pydantic import BaseModel, Field

from app import kinds
from app.api.deps import Db, Settings
from app.api.errors import COMMON
from app.api.flow_schemas import RatePublic
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


class FlowPublic(BaseModel):
    """A kind's flow control by key (docs/howto/flow-control.md): the limits that apply
    to the jobs of one key (same tenant and kind). A submission may give its own key and
    ``if_active``; the limits are the kind's."""

    keyed: bool = Field(
        description="the kind computes a job's key from its payload (a submission may give "
        "one anyway)"
    )
    concurrency: int | None = Field(
        description="at most this many jobs of a key hold it at once (from their first claim "
        "until they end); null: no limit"
    )
    if_active: Literal["enqueue", "reject", "cancel_active", "drop_new"] = Field(
        description="what a new job of a key does while one of the key's jobs is active: "
        "enqueue (wait its turn), reject (409), cancel_active (cancel it), drop_new "
        "(answered with the active job)"
    )
    debounce_seconds: float | None = Field(
        description="only the last job of a key submitted within this window runs, this long "
        "after it; null: no debounce"
    )
    rate: RatePublic | None = Field(description="starts per period per key; null: no limit")


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
    flow: FlowPublic = Field(description="its flow control by key (its limits per key)")


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
                flow=FlowPublic.model_validate(k.flow.to_json()),
            )
            for name, k in sorted(kinds.REGISTRY.items())
            for payload, result in [_schemas_of(k)]
        ]
    )
