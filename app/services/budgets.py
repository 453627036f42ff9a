"""Provider budgets (docs/explain/design.md#throttles): before a model call goes out it reserves
a request and its estimated tokens under its model's shared budget (TASKLEASE_MODEL_BUDGETS,
per calendar minute, across every worker and Lambda) and under its tenant's daily token
budget; after, the reported usage settles the estimate. Over a model budget the job waits
(``BudgetWait``: the lease handed back, no attempt used); over the tenant's day it waits
for the next UTC day (a timer wait) or fails, as TASKLEASE_TENANT_BUDGET_POLICY says.

No budget configured: no round trip. Whether any tenant has a daily budget of its own is
read at most every TENANT_FLAG_SECONDS per process.
"""

from __future__ import annotations

import datetime as dt
import random
import time
import uuid
import weakref
from dataclasses import dataclass

from app import errors, metrics, store
from app.kinds.generate import Usage
from app.kinds.waits import Wait
from app.settings.config import Settings

TENANT_FLAG_SECONDS = 30.0
# The wait for the next minute is stretched by up to this much, so waiters spread out.
WAIT_JITTER_SECONDS = 1.0
# The key of a tenant's daily-budget timer wait.
TENANT_WAIT_KEY = "tenant-daily-tokens"

# Per database pool: (read at, whether any tenant has a daily budget of its own).
_tenant_flag: weakref.WeakKeyDictionary[store.Database, tuple[float, bool]] = (
    weakref.WeakKeyDictionary()
)


@dataclass(frozen=True)
class Held:
    """What a call reserved: its estimate in a model's minute and in a tenant's day."""

    tokens: int
    model: str | None = None
    minute: dt.datetime | None = None
    tenant: str | None = None
    day: dt.date | None = None


async def _tenant_budgets_apply(settings: Settings, db: store.Database) -> bool:
    if settings.tenant_daily_tokens is not None:
        return True
    read_at, anyone = _tenant_flag.get(db, (-TENANT_FLAG_SECONDS, False))
    if time.monotonic() - read_at >= TENANT_FLAG_SECONDS:
        anyone = await store.model_limits.any_tenant_daily_tokens(db)
        _tenant_flag[db] = (time.monotonic(), anyone)
    return anyone


async def reserve(
    settings: Settings, db: store.Database, job_id: uuid.UUID, model: str, tokens: int
) -> Held | None:
    """Reserve the call (``model``: "provider/model"); None when no budget applies.
    Raises BudgetWait, Suspend (the tenant's day, policy wait) or PermanentError."""
    budget = settings.model_budgets.get(model)
    if budget is not None and budget.tpm is not None and tokens > budget.tpm:
        raise errors.PermanentError(
            f"the call's estimated {tokens} tokens exceed {model}'s budget of {budget.tpm} "
            "tokens a minute (TASKLEASE_MODEL_BUDGETS): it could never go out"
        )
    held = Held(tokens)
    if await _tenant_budgets_apply(settings, db):
        held = await _reserve_tenant(settings, db, job_id, tokens)
    if budget is None:
        return held if held.tenant else None
    got = await store.model_limits.reserve_model(
        db, model, tokens=tokens, rpm=budget.rpm, tpm=budget.tpm
    )
    if got.minute is None:
        await settle(db, held, None)  # the tenant's tokens back: the call does not go out
        metrics.count(metrics.BUDGET_WAITS, budget="model")
        delay = got.wait + random.uniform(0, WAIT_JITTER_SECONDS)  # noqa: S311 - spread, not secret
        limits = ", ".join(
            f"{v} {k}" for k, v in (("rpm", budget.rpm), ("tpm", budget.tpm)) if v is not None
        )
        raise errors.BudgetWait(
            f"model budget of {model} ({limits}, TASKLEASE_MODEL_BUDGETS) used up for this "
            f"minute: waiting {delay:.1f} s, no attempt used",
            budget="model",
            delay=delay,
        )
    return Held(tokens, model, got.minute, held.tenant, held.day)


async def _reserve_tenant(
    settings: Settings, db: store.Database, job_id: uuid.UUID, tokens: int
) -> Held:
    got = await store.model_limits.reserve_tenant(
        db, job_id, tokens=tokens, default=settings.tenant_daily_tokens
    )
    if got is None or got.budget is None:
        return Held(tokens)
    if got.day is not None:
        return Held(tokens, tenant=got.tenant, day=got.day)
    named = (
        f"tenant {got.tenant}'s daily token budget ({got.budget} tokens: `tasklease limits "
        "set --daily-tokens` or TASKLEASE_TENANT_DAILY_TOKENS)"
    )
    if tokens > got.budget:
        raise errors.PermanentError(f"the call's estimated {tokens} tokens never fit in {named}")
    if settings.tenant_budget_policy == "fail":
        raise errors.PermanentError(
            f"{named} is used up for today (UTC); TASKLEASE_TENANT_BUDGET_POLICY=fail"
        )
    metrics.count(metrics.BUDGET_WAITS, budget="tenant_day")
    raise errors.Suspend(Wait("timer", TENANT_WAIT_KEY, wake_at=got.next_day))


async def settle(db: store.Database, held: Held | None, usage: Usage | None) -> None:
    """Replace the estimate with what the provider reported (``usage`` None: nothing used,
    the call never went out or was throttled). Tokens not reported keep the estimate."""
    if held is None:
        return
    if usage is None:
        used = 0
    elif usage.input_tokens is None and usage.output_tokens is None:
        return
    else:
        used = (usage.input_tokens or 0) + (usage.output_tokens or 0)
    delta = used - held.tokens
    if held.model is not None and held.minute is not None:
        await store.model_limits.settle_model(db, held.model, held.minute, delta=delta)
    if held.tenant is not None and held.day is not None:
        await store.model_limits.settle_tenant(db, held.tenant, held.day, delta=delta)
