"""support.triage: classify a support ticket, draft a reply, post it to a webhook.

Two effects, so a crash between them resumes at the second: the model is not
asked twice, and the webhook gets the effect's idempotency key. The model and the
HTTP client are this kind's deps, built once per process by ``build_deps``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import httpx
from pydantic import BaseModel, ConfigDict, EmailStr, Field

from app import errors
from app.demos.triage import providers
from app.demos.triage import settings as triage_settings
from app.kinds import JobContext, kind
from app.settings.config import Settings


class Ticket(BaseModel):
    model_config = ConfigDict(extra="forbid")

    ticket_id: str = Field(min_length=1, max_length=200)
    subject: str = Field(min_length=1, max_length=1000)
    body: str = Field(min_length=1, max_length=100_000)
    customer_email: EmailStr | None = None


class TriageResult(BaseModel):
    ticket_id: str
    category: str | None
    priority: str | None
    draft_reply: str | None
    delivered: bool


@dataclass
class TriageDeps:
    model: providers.ModelProvider
    http: httpx.AsyncClient
    webhook_url: str | None

    async def aclose(self) -> None:
        await self.http.aclose()


def build_deps(settings: Settings) -> TriageDeps:
    """The demo's deps from its own settings (TriageSettings: TASKLEASE_MODEL_PROVIDER,
    TASKLEASE_FAKE_MODEL_*, TASKLEASE_WEBHOOK_URL, ...), read when the worker starts."""
    return deps_from(triage_settings.load())


def deps_from(own: triage_settings.TriageSettings) -> TriageDeps:
    return TriageDeps(
        model=providers.build(own),
        http=httpx.AsyncClient(timeout=own.webhook_timeout_seconds),
        webhook_url=own.webhook_url,
    )


class WebhookError(errors.JobError):
    """The webhook did not take the delivery."""


async def deliver(deps: TriageDeps, doc: dict[str, Any], *, idempotency_key: str) -> dict[str, Any]:
    """POST ``doc`` to the configured webhook with an Idempotency-Key (a receiver can drop
    a second delivery under one key). A 5xx, a 429 or no answer is retried; another 4xx
    is permanent. With no webhook configured: ``{"delivered": False, ...}``."""
    if not deps.webhook_url:
        return {"delivered": False, "reason": "no webhook configured"}
    try:
        resp = await deps.http.post(
            deps.webhook_url, json=doc, headers={"Idempotency-Key": idempotency_key}
        )
    except httpx.HTTPError as exc:
        raise WebhookError(f"webhook unreachable: {type(exc).__name__}") from exc
    if resp.status_code >= 500 or resp.status_code == 429:
        raise WebhookError(f"webhook answered {resp.status_code}")
    if resp.status_code >= 400:
        raise errors.PermanentError(f"webhook refused the delivery: {resp.status_code}")
    return {"delivered": True, "status": resp.status_code}


@kind("support.triage", timeout_seconds=300, deps=build_deps)
async def triage(ctx: JobContext[TriageDeps], ticket: Ticket) -> TriageResult:
    """Classify a support ticket with a model, draft a reply, post it to a webhook."""
    model = ctx.deps.model
    key = ctx.idempotency_key("triage")
    answer: dict[str, Any] = await ctx.model_call(
        "triage",
        lambda: model.triage(subject=ticket.subject, body=ticket.body, idempotency_key=key),
        budget=model.budget_name("triage"),
        tokens=providers.estimate_tokens(ticket.subject, ticket.body),
    )

    async def post() -> dict[str, Any]:
        doc = {"job_id": str(ctx.job_id), "ticket_id": ticket.ticket_id, "triage": answer}
        return await deliver(ctx.deps, doc, idempotency_key=ctx.idempotency_key("post"))

    delivery: dict[str, Any] = await ctx.effect("post", post)
    return TriageResult(
        ticket_id=ticket.ticket_id,
        category=answer.get("category"),
        priority=answer.get("priority"),
        draft_reply=answer.get("draft_reply"),
        delivered=delivery.get("delivered", False),
    )
