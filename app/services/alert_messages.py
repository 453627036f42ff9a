"""What an alert says: the JSON body a webhook receives (and EventBridge's detail), the one
line a person reads, and Slack's ``{"text": ...}`` (docs/howto/alerts.md)."""

from __future__ import annotations

import datetime as dt
from typing import Any

from app.store.alerts import DueAlert

TYPES = (
    "job.dead_lettered",
    "job.stalled",
    "dlq.over_threshold",
    "queue.oldest_over_threshold",
    "tenant.budget_exhausted",
)
MAX_ERROR_CHARS = 300


def _clip(text: object, limit: int = MAX_ERROR_CHARS) -> str:
    s = str(text)
    return s if len(s) <= limit else s[: limit - 1] + "…"


def summary(alert: DueAlert) -> str:
    """One line for a person (Slack, a log, an e-mail bridge)."""
    d = alert.detail
    who = f"tenant {alert.tenant}" if alert.tenant else "the deployment"
    if alert.type == "job.dead_lettered":
        reason = d.get("error") or d.get("detail") or "no error recorded"
        return (
            f"tasklease: job {alert.job_id} ({d.get('kind')}, {who}) was dead-lettered "
            f"after attempt {d.get('attempt')}/{d.get('max_attempts')}: {_clip(reason)}"
        )
    if alert.type == "job.stalled":
        return (
            f"tasklease: job {alert.job_id} ({d.get('kind')}, {who}) stalled: its lease "
            f"expired with no heartbeat (attempt {d.get('attempt')}, worker {d.get('worker')})"
        )
    if alert.type == "dlq.over_threshold":
        return (
            f"tasklease: {d.get('dead_lettered')} dead-lettered jobs, at or over the "
            f"threshold of {d.get('threshold')}"
        )
    if alert.type == "queue.oldest_over_threshold":
        return (
            f"tasklease: the oldest queued job ({d.get('job_id')}) has waited "
            f"{float(d.get('age_seconds') or 0):.0f} s, over the threshold of "
            f"{d.get('threshold_seconds')} s"
        )
    if alert.type == "tenant.budget_exhausted":
        return (
            f"tasklease: {who} used up its daily model token budget "
            f"({d.get('budget')} tokens) for {d.get('day')} (UTC)"
        )
    return f"tasklease: {alert.type} ({who})"


def body(alert: DueAlert) -> dict[str, Any]:
    """The webhook's JSON body, as the Standard Webhooks spec shapes a payload (type,
    timestamp, data), with the alert's id and its one-line summary."""
    created = alert.created_at
    if created.tzinfo is None:
        created = created.replace(tzinfo=dt.UTC)
    return {
        "id": alert.dedup_key,
        "type": alert.type,
        "timestamp": created.isoformat(),
        "tenant": alert.tenant,
        "job_id": None if alert.job_id is None else str(alert.job_id),
        "summary": summary(alert),
        "data": alert.detail,
    }


def slack_escape(text: str) -> str:
    """Slack reads &, < and > in text as markup: escaped, a job's error stays text."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def slack_body(alert: DueAlert) -> dict[str, Any]:
    return {"text": slack_escape(summary(alert))}
