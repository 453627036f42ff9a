"""GET /v1/usage: model calls' tokens and estimated cost by tenant, kind, UTC day and
model. A tenant key sees its own tenant; an admin key every tenant, or ``?tenant=``."""

from __future__ import annotations

import datetime as dt
from typing import Annotated

from fastapi import APIRouter, Query
from pydantic import BaseModel, Field

from app.api.deps import Db, Settings
from app.api.errors import COMMON
from app.api.schemas import Problem
from app.api.security import TenantScope
from app.services import costs

router = APIRouter()


class UsageRow(BaseModel):
    tenant: str
    kind: str
    day: dt.date
    model: str
    calls: int
    input_tokens: int
    output_tokens: int
    cost_usd: float | None = Field(description="estimated; null for a model without a price")


class Usage(BaseModel):
    since: dt.date
    until: dt.date
    rows: list[UsageRow]
    input_tokens: int
    output_tokens: int
    cost_usd: float = Field(description="estimated, over the priced models only")


@router.get(
    "/v1/usage",
    response_model=Usage,
    responses={
        403: {"model": Problem, "description": "a tenant key naming another tenant"},
        **COMMON,
    },
)
async def usage(
    db: Db,
    scope: TenantScope,
    settings: Settings,
    since: Annotated[
        dt.date | None, Query(description="first UTC day (default: 29 days before until)")
    ] = None,
    until: Annotated[dt.date | None, Query(description="last UTC day (default: today)")] = None,
) -> Usage:
    """Model calls, tokens and estimated cost by tenant, kind, day and model, for at most
    366 days."""
    first, last = costs.days(since, until, dt.datetime.now(dt.UTC).date())
    rows = await costs.totals(settings, db, tenant=scope, since=first, until=last)
    return Usage(
        since=first,
        until=last,
        rows=[UsageRow.model_validate(r) for r in rows],
        input_tokens=sum(r["input_tokens"] for r in rows),
        output_tokens=sum(r["output_tokens"] for r in rows),
        cost_usd=round(sum(r["cost_usd"] or 0 for r in rows), 8),
    )
