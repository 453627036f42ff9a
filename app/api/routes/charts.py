"""GET /v1/charts: jobs submitted, succeeded, failed and dead-lettered per bucket, and
p50/p95 latency per kind, over the last hour, day or week (docs/howto/charts.md). A
tenant key sees its own tenant's series; an admin key every tenant's, or ``?tenant=``."""

from __future__ import annotations

import datetime as dt
from typing import Annotated, Literal

from fastapi import APIRouter, Query
from pydantic import BaseModel, Field

from app.api.deps import Db
from app.api.errors import COMMON
from app.api.schemas import Problem, Storable
from app.api.security import TenantScope
from app.services import charts

router = APIRouter()

Ms = list[float | None]


class Percentiles(BaseModel):
    p50_ms: Ms
    p95_ms: Ms
    run_p50_ms: Ms
    run_p95_ms: Ms


class KindLatency(BaseModel):
    kind: str | None = Field(description="null: every kind together")
    finished: int = Field(description="jobs that finished (succeeded or dead-lettered)")
    p50_ms: float | None = Field(description="submit to finish, over the window")
    p95_ms: float | None
    run_p50_ms: float | None = Field(description="first start to finish, over the window")
    run_p95_ms: float | None
    histogram: list[int] = Field(
        description=f"finished jobs by latency bucket ({charts.BUCKETS}, four a decade "
        "from 10 ms: bucket k >= 1 holds [10 ms * 10^(k/4), 10 ms * 10^((k+1)/4)))"
    )
    series: Percentiles = Field(description="the same per bucket of the window (null: none)")


class Counts(BaseModel):
    submitted: list[int]
    succeeded: list[int]
    failed: list[int] = Field(description="attempts that failed and will be retried, or stalled")
    dead_lettered: list[int]


class Totals(BaseModel):
    submitted: int
    succeeded: int
    failed: int
    dead_lettered: int


class Charts(BaseModel):
    window: str
    width_seconds: int = Field(description="seconds a bucket: 60, 900 or 3600")
    since: dt.datetime
    until: dt.datetime
    tenant: str | None = Field(description="null: every tenant")
    kind: str | None
    times: list[int] = Field(description="each bucket's start, epoch seconds")
    counts: Counts
    totals: Totals
    latency: list[KindLatency] = Field(description="every kind together first, then each")


@router.get(
    "/v1/charts",
    response_model=Charts,
    responses={
        403: {"model": Problem, "description": "a tenant key naming another tenant"},
        **COMMON,
    },
)
async def get_charts(
    db: Db,
    scope: TenantScope,
    window: Annotated[
        Literal["hour", "day", "week"],
        Query(description="hour (minute buckets), day (15 minutes) or week (hours)"),
    ] = "hour",
    kind: Annotated[str | None, Query(min_length=1, max_length=100), Storable] = None,
) -> Charts:
    """Throughput and latency over time, from buckets kept as jobs change state (no scan
    of jobs): a cost that does not grow with the history."""
    found = await charts.series(db, window=window, tenant=scope, kind=kind)
    return Charts.model_validate(found)
