"""Outgoing alerts (docs/explain/design.md#alerts).

An alert row is written in the transaction of the event that causes it (a trigger on a
job's dead-lettered or stalled transition, the refused reservation of a tenant's token
budget, a threshold condition's crossing), keyed so that one event makes one row. The
sweeper then delivers it here: to the deployment's webhook, the tenant's webhook and the
EventBridge bus, each signed (Standard Webhooks) with the row's key as ``webhook-id``.
A destination that took it is not sent it again; the others are retried with backoff.

The rows are locked (not marked) while they are sent and marked in the same transaction
after: a crash between the send and the mark (crash point ``after_alert_sent``) sends the
alert again with the same ``webhook-id``. Delivery is at least once, with an id for a
receiver to process it exactly once.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import random
from dataclasses import dataclass
from typing import Any

import httpx

from app import crashpoints, errors, metrics, store, webhook_signing
from app.services import alert_messages, auth
from app.settings.alerts import check_url, is_slack
from app.settings.config import Settings
from app.store.alerts import DueAlert
from app.transport import events

log = logging.getLogger(__name__)

BATCH = 20  # alerts one delivering transaction takes
BATCHES_PER_SWEEP = 5
PRUNE_BATCH = 1000
WEBHOOK, TENANT_WEBHOOK, EVENTBRIDGE = "webhook", "tenant_webhook", "eventbridge"
USER_AGENT = "tasklease-alerts"


@dataclass(frozen=True)
class Hook:
    name: str
    url: str
    secret: str | None


def backoff(settings: Settings, attempts: int) -> float:
    """The wait after the ``attempts``-th failed attempt: doubling from the base up to the
    cap, with jitter (half to all of it) so that many failed alerts spread out."""
    ceiling: float = min(
        settings.alert_backoff_cap_seconds,
        settings.alert_backoff_base_seconds * 2 ** min(attempts - 1, 30),
    )
    return ceiling * random.uniform(0.5, 1.0)  # noqa: S311 - spread, not secret


def tenant_view(row: dict[str, Any]) -> dict[str, Any]:
    """An alert row as a tenant key sees it: the deliveries to its own webhook and their
    errors only; the deployment's destinations (its webhook, EventBridge) are not its."""
    errors_ = [
        e for e in (row["last_error"] or "").split("; ") if e.startswith(f"{TENANT_WEBHOOK}:")
    ]
    return {
        **row,
        "delivered": [d for d in row["delivered"] if d == TENANT_WEBHOOK],
        "last_error": "; ".join(errors_) or None,
    }


def _hooks(settings: Settings, alert: DueAlert) -> list[Hook]:
    hooks = []
    if settings.alert_webhook_url:
        hooks.append(Hook(WEBHOOK, settings.alert_webhook_url, settings.alert_webhook_secret))
    if alert.tenant_url:
        hooks.append(Hook(TENANT_WEBHOOK, alert.tenant_url, alert.tenant_secret))
    return [h for h in hooks if h.name not in alert.delivered]


async def post(http: httpx.AsyncClient, hook: Hook, alert: DueAlert, seconds: float) -> str | None:
    """One webhook delivery: None when the receiver answered 2xx, else what went wrong."""
    slack = is_slack(hook.url)
    payload = alert_messages.slack_body(alert) if slack else alert_messages.body(alert)
    headers: dict[str, str] = {}
    raw = json.dumps(payload, default=str, separators=(",", ":")).encode()
    if hook.secret and not slack:
        headers = webhook_signing.sign(hook.secret, alert.dedup_key, raw)
    headers |= {"content-type": "application/json", "user-agent": USER_AGENT}
    try:
        resp = await http.post(hook.url, content=raw, headers=headers, timeout=seconds)
    except Exception as exc:
        return f"{hook.name}: {type(exc).__name__}: {exc}"[:500]
    if 200 <= resp.status_code < 300:
        return None
    return f"{hook.name}: HTTP {resp.status_code}"


async def _attempt(
    settings: Settings,
    http: httpx.AsyncClient,
    bus: events.EventBus | None,
    alert: DueAlert,
) -> tuple[list[str], list[str]]:
    """Send one alert to every destination it has not reached: (took, errors)."""
    if alert.type == "job.stalled" and not settings.alert_stalled:
        return [], []
    hooks = _hooks(settings, alert)
    sends = [post(http, h, alert, settings.alert_timeout_seconds) for h in hooks]
    outcomes = list(await asyncio.gather(*sends))
    names = [h.name for h in hooks]
    if bus is not None and EVENTBRIDGE not in alert.delivered:
        resources = [] if alert.job_id is None else [f"tasklease:job/{alert.job_id}"]
        event = events.Event(alert.type, alert_messages.body(alert), tuple(resources))
        outcomes.append((await bus.put([event]))[0])
        names.append(EVENTBRIDGE)
    for name, error in zip(names, outcomes, strict=True):
        metrics.count(
            metrics.ALERT_DELIVERIES,
            destination=name,
            outcome="sent" if error is None else "failed",
        )
    took = [n for n, e in zip(names, outcomes, strict=True) if e is None]
    failed = [e for e in outcomes if e is not None]
    return took, failed


@dataclass
class _Senders:
    """The HTTP client and the bus client, opened at the first batch that needs them:
    a sweep with nothing due opens neither."""

    stack: contextlib.AsyncExitStack
    settings: Settings
    http: httpx.AsyncClient | None = None
    bus: events.EventBus | None = None

    async def open(self) -> tuple[httpx.AsyncClient, events.EventBus | None]:
        if self.http is None:
            self.http = await self.stack.enter_async_context(httpx.AsyncClient())
            self.bus = await self.stack.enter_async_context(events.connect(self.settings))
        return self.http, self.bus


async def _record(
    settings: Settings, conn: store.Conn, alert: DueAlert, took: list[str], failed: list[str]
) -> bool:
    if failed:
        log.warning(
            "alert not delivered; retried later",
            extra={"alert": alert.dedup_key, "error": "; ".join(failed)},
        )
    await store.alerts.record_delivery_txn(
        conn,
        alert.id,
        took=took,
        done=not failed,
        error="; ".join(failed)[:1000] or None,
        backoff=backoff(settings, alert.attempts + 1),
        max_attempts=settings.alert_max_attempts,
    )
    return not failed


async def deliver(settings: Settings, db: store.Database) -> int:
    """Deliver the due alerts, a batch per transaction (several sweepers share them:
    SKIP LOCKED), at most BATCHES_PER_SWEEP batches, each send bounded by
    TASKLEASE_ALERT_TIMEOUT_SECONDS; answers how many were delivered to every destination."""
    delivered = 0
    async with contextlib.AsyncExitStack() as stack:
        senders = _Senders(stack, settings)
        for _ in range(BATCHES_PER_SWEEP):
            async with db.transaction() as conn:
                due = await store.alerts.take_due_txn(conn, limit=BATCH)
                if not due:
                    break
                http, bus = await senders.open()
                crashpoints.hit(crashpoints.Point.BEFORE_ALERT_SENT, alerts=len(due))
                results = await asyncio.gather(*(_attempt(settings, http, bus, a) for a in due))
                crashpoints.hit(crashpoints.Point.AFTER_ALERT_SENT, alerts=len(due))
                done = 0
                for alert, (took, failed) in zip(due, results, strict=True):
                    done += await _record(settings, conn, alert, took, failed)
                delivered += done
            # A short batch was the last; a batch none of which went through likely meets
            # a destination that is down: the next sweep tries again, this one goes on.
            if len(due) < BATCH or not done:
                break
    return delivered


async def check_thresholds(settings: Settings, db: store.Database) -> int:
    """Measure the deployment-wide conditions; answers the alerts their crossings wrote."""
    measured: list[tuple[str, str, float, bool, dict[str, object]]] = []
    if settings.alert_dlq_threshold is not None:
        n = await store.alerts.dead_lettered_total(db)
        limit = settings.alert_dlq_threshold
        detail: dict[str, object] = {"dead_lettered": n, "threshold": limit}
        measured.append(("dlq_over_threshold", "dlq.over_threshold", n, n >= limit, detail))
    if settings.alert_oldest_queued_seconds is not None:
        oldest = await store.alerts.oldest_queued(db)
        age, job_id = oldest if oldest else (0.0, None)
        limit = settings.alert_oldest_queued_seconds
        detail = {"age_seconds": round(age, 1), "threshold_seconds": limit, "job_id": str(job_id)}
        measured.append(("oldest_queued", "queue.oldest_over_threshold", age, age > limit, detail))
    fired = 0
    for name, type_, value, over, about in measured:
        written = await store.alerts.condition(
            db, name, type_=type_, over=over, value=value, detail=about
        )
        fired += written is not None
    return fired


async def sweep(settings: Settings, db: store.Database) -> int:
    """The sweeper's step: thresholds measured, due alerts delivered, old ones pruned."""
    await check_thresholds(settings, db)
    delivered = await deliver(settings, db)
    await store.alerts.prune(db, keep_seconds=settings.retain_alerts_seconds, limit=PRUNE_BATCH)
    return delivered


# --- what an operator manages and reads ------------------------------------------------


@dataclass(frozen=True)
class TenantWebhook:
    tenant: str
    url: str
    secret: str | None  # the secret made for it; None when the caller gave its own


async def set_tenant_webhook(
    db: store.Database, tenant: str, url: str, secret: str | None
) -> TenantWebhook:
    """A tenant's alert webhook; a secret is made when none is given (and answered once)."""
    auth.check_tenant(tenant)
    try:
        check_url(url)
        if secret is not None:
            webhook_signing.secret_key(secret)
    except ValueError as exc:
        raise errors.BadRequest(str(exc)) from exc
    made = webhook_signing.new_secret() if secret is None else None
    await store.alerts.set_tenant_webhook(db, tenant, url, secret or str(made))
    return TenantWebhook(tenant, url, made)


async def clear_tenant_webhook(db: store.Database, tenant: str) -> None:
    auth.check_tenant(tenant)
    if not await store.alerts.clear_tenant_webhook(db, tenant):
        raise errors.NotFound(f"tenant {tenant!r} has no alert webhook")


async def tenant_webhooks(db: store.Database) -> list[dict[str, Any]]:
    """The tenants' alert webhooks, without their secrets."""
    return await store.alerts.tenant_webhooks(db)


async def list_alerts(
    db: store.Database, *, scope: str | None, type_: str | None, limit: int
) -> list[dict[str, Any]]:
    """The newest alerts of a tenant (``scope``), or of every tenant and the deployment."""
    if type_ is not None and type_ not in alert_messages.TYPES:
        raise errors.BadRequest(
            f"type {type_!r} is not an alert type; one of {', '.join(alert_messages.TYPES)}"
        )
    return await store.alerts.listing(db, tenant=scope, type_=type_, limit=limit)
