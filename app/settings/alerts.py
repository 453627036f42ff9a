"""Outgoing alerts (docs/explain/design.md#alerts): where they go (a signed webhook, a Slack
incoming webhook, an EventBridge bus), the thresholds, and the delivery's retries. A part
of ``app.settings.config.Settings``; a tenant's own webhook is a table, not a setting."""

from __future__ import annotations

import urllib.parse
from typing import Self

import httpx
from pydantic import Field, field_validator, model_validator
from pydantic_settings import BaseSettings

from app import webhook_signing

DAY = 86_400
SLACK_HOSTS = ("hooks.slack.com",)


def is_slack(url: str) -> bool:
    """A Slack incoming webhook: it takes ``{"text": ...}`` and no signature."""
    return (urllib.parse.urlsplit(url).hostname or "").lower() in SLACK_HOSTS


def check_url(url: str) -> str:
    """An http(s) URL with a host; ValueError saying what is wrong."""
    if len(url) > 2000:
        raise ValueError("a webhook URL is at most 2000 characters")
    try:  # what the delivery's client will refuse (a bad port, a control character)
        parts = urllib.parse.urlsplit(url)
        _ = parts.port
        httpx.URL(url)
    except (ValueError, httpx.InvalidURL) as exc:
        raise ValueError(f"{url!r} is not a valid URL: {exc}") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"{url!r} is not an http:// or https:// URL with a host")
    return url


class AlertSettings(BaseSettings):
    """Alerts on a dead letter, a stalled job, the DLQ over a threshold, the oldest queued
    job past an age, a tenant's daily token budget used up."""

    alert_webhook_url: str | None = Field(
        None,
        description="the deployment's alert webhook: every alert is POSTed there, signed (Standard Webhooks); a Slack incoming webhook (hooks.slack.com) gets Slack's {\"text\": ...} instead",
    )
    alert_webhook_secret: str | None = Field(
        None,
        description="the webhook's signing secret, whsec_ then base64 of 24 to 64 bytes (`tasklease alerts new-secret`); required with TASKLEASE_ALERT_WEBHOOK_URL unless it is a Slack webhook",
    )
    alert_event_bus: str | None = Field(
        None,
        description="on AWS: the EventBridge bus (name or ARN) every alert is also put on (source tasklease, detail-type the alert's type); unset: none",
    )
    alert_dlq_threshold: int | None = Field(
        None,
        ge=1,
        le=100_000_000,
        description="alert once when the dead-lettered jobs reach this many (again after they fell below it); unset: no such alert",
    )
    alert_oldest_queued_seconds: int | None = Field(
        None,
        ge=1,
        le=366 * DAY,
        description="alert once when the oldest queued job is older than this (again after the queue caught up); unset: no such alert",
    )
    alert_stalled: bool = Field(
        True,
        description="whether a stalled job (its lease expired with no heartbeat) is delivered as an alert; dead letters always are",
    )
    alert_max_attempts: int = Field(
        12,
        ge=1,
        le=100,
        description="delivery attempts of one alert before it is given up (kept, with its last error, for `tasklease alerts list`)",
    )
    alert_backoff_base_seconds: float = Field(
        5.0,
        gt=0,
        le=3600,
        description="the first retry of a failed alert delivery waits this long, doubling up to TASKLEASE_ALERT_BACKOFF_CAP_SECONDS",
    )
    alert_backoff_cap_seconds: float = Field(
        3600.0, gt=0, le=DAY, description="the longest wait between two delivery attempts"
    )
    alert_timeout_seconds: float = Field(
        10.0, gt=0, le=60, description="how long one webhook delivery may take"
    )
    retain_alerts_seconds: int = Field(
        30 * DAY,
        ge=60,
        le=3650 * DAY,
        description="how long a delivered (or given up) alert is kept",
    )

    @field_validator("alert_webhook_url")
    @classmethod
    def _url(cls, value: str | None) -> str | None:
        return None if value is None else check_url(value)

    @field_validator("alert_webhook_secret")
    @classmethod
    def _secret(cls, value: str | None) -> str | None:
        if value is not None:
            webhook_signing.secret_key(value)  # ValueError names what is wrong
        return value

    @model_validator(mode="after")
    def _coherent_alerts(self) -> Self:
        url = self.alert_webhook_url
        if url and not is_slack(url) and not self.alert_webhook_secret:
            raise ValueError(
                "TASKLEASE_ALERT_WEBHOOK_SECRET must be set with TASKLEASE_ALERT_WEBHOOK_URL "
                "(a receiver must be able to verify the alerts; `tasklease alerts new-secret` "
                "makes one)"
            )
        if self.alert_backoff_cap_seconds < self.alert_backoff_base_seconds:
            raise ValueError(
                "TASKLEASE_ALERT_BACKOFF_CAP_SECONDS must be at least "
                "TASKLEASE_ALERT_BACKOFF_BASE_SECONDS"
            )
        return self

    @property
    def alerts_out(self) -> bool:
        """Whether any deployment-wide destination is configured."""
        return bool(self.alert_webhook_url or self.alert_event_bus)
