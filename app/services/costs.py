"""Model usage and its estimated cost: prices per model from TASKLEASE_MODEL_PRICES
(US dollars per million tokens), the metrics of each recorded model call, and the
totals GET /v1/jobs/{id} and GET /v1/usage answer."""

from __future__ import annotations

import datetime as dt
import uuid
from typing import Any

from app import errors, metrics, store
from app.kinds.generate import Usage
from app.settings.config import Settings
from app.settings.models import ModelPrice

MAX_DAYS = 366


def cost_usd(settings: Settings, model: str, input_tokens: int, output_tokens: int) -> float | None:
    """The estimated cost in US dollars; None for a model without a price."""
    price = price_of(settings, model)
    if price is None:
        return None
    return round((input_tokens * price.input + output_tokens * price.output) / 1_000_000, 8)


def price_of(settings: Settings, model: str) -> ModelPrice | None:
    """The price of ``model``, or of the longest priced name it is a dated version of
    (providers answer "gpt-4o-mini-2024-07-18" to a request for "gpt-4o-mini")."""
    prices = settings.model_prices
    if model in prices:
        return prices[model]
    versions = [name for name in prices if model.startswith(name + "-")]
    return prices[max(versions, key=len)] if versions else None


def count(settings: Settings | None, kind: str, usage: Usage) -> None:
    """The metrics of one recorded model call: its tokens, and its cost when priced."""
    tokens_in, tokens_out = usage.input_tokens or 0, usage.output_tokens or 0
    metrics.MODEL_TOKENS.labels(kind, usage.model, "input").inc(tokens_in)
    metrics.MODEL_TOKENS.labels(kind, usage.model, "output").inc(tokens_out)
    cost = None if settings is None else cost_usd(settings, usage.model, tokens_in, tokens_out)
    if cost is not None:
        metrics.MODEL_COST.labels(kind, usage.model).inc(cost)


async def of_job(settings: Settings, db: store.Database, job_id: uuid.UUID) -> dict[str, Any]:
    """A job's tokens and estimated cost: {input_tokens, output_tokens, cost_usd, models}.
    cost_usd is None when a model the job used has no price."""
    rows = await store.effects.job_usage(db, job_id)
    models = [_priced(settings, r) for r in rows]
    costs = [m["cost_usd"] for m in models]
    return {
        "input_tokens": sum(m["input_tokens"] for m in models),
        "output_tokens": sum(m["output_tokens"] for m in models),
        "cost_usd": None if None in costs else round(sum(costs), 8),
        "models": models,
    }


def _priced(settings: Settings, row: dict[str, Any]) -> dict[str, Any]:
    tin, tout = int(row["input_tokens"]), int(row["output_tokens"])
    return {
        "model": row["model"],
        "calls": int(row["calls"]),
        "input_tokens": tin,
        "output_tokens": tout,
        "cost_usd": cost_usd(settings, row["model"], tin, tout),
    }


def days(since: dt.date | None, until: dt.date | None, today: dt.date) -> tuple[dt.date, dt.date]:
    """The asked days (default: the last 30 up to today); BadRequest naming the
    parameter when they are out of order or span more than MAX_DAYS."""
    until = until or today
    try:
        since = since or until - dt.timedelta(days=29)
    except OverflowError:
        raise errors.BadRequest(f"until: {until} leaves no 30 days before it") from None
    if since > until:
        raise errors.BadRequest(f"since: {since} is after until ({until})")
    if (until - since).days + 1 > MAX_DAYS:
        raise errors.BadRequest(f"since: the days asked span more than {MAX_DAYS} days")
    return since, until


async def totals(
    settings: Settings,
    db: store.Database,
    *,
    tenant: str | None,
    since: dt.date,
    until: dt.date,
) -> list[dict[str, Any]]:
    """Model calls by tenant, kind, day and model: calls, tokens and estimated cost."""
    rows = await store.effects.usage_totals(db, tenant=tenant, since=since, until=until)
    return [
        {
            "tenant": r["tenant"],
            "kind": r["kind"],
            "day": r["day"].isoformat(),
            **_priced(settings, r),
        }
        for r in rows
    ]
