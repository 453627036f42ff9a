"""support.triage: classify a support ticket, draft a reply, post it to a webhook.

Two effects, so a crash between them resumes at the second: the model is not
asked twice, and the webhook gets the effect's idempotency key.
"""

from __future__ import annotations

from typing import Any

import httpx
from pydantic import BaseModel, ConfigDict, EmailStr, Field

from app import errors
from app.kinds import Kind, register
from app.kinds.context import JobContext


class Ticket(BaseModel):
    model_config = ConfigDict(extra="forbid")

    ticket_id: str = Field(min_length=1, max_length=200)
    subject: str = Field(min_length=1, max_length=1000)
    body: str = Field(min_length=1, max_length=100_000)
    customer_email: EmailStr | None = None


class WebhookError(errors.JobError):
    """The webhook did not take the delivery."""


async def run(ctx: JobContext, ticket: Ticket) -> dict[str, Any]:
    model = ctx.services.model
    key = ctx.idempotency_key("triage")
    answer: dict[str, Any] = await ctx.effect(
        "triage",
        lambda: model.triage(subject=ticket.subject, body=ticket.body, idempotency_key=key),
    )

    async def post() -> dict[str, Any]:
        url = ctx.services.webhook_url
        if not url:
            return {"delivered": False, "reason": "no webhook configured"}
        doc = {"job_id": str(ctx.job_id), "ticket_id": ticket.ticket_id, "triage": answer}
        try:
            resp = await ctx.services.http.post(
                url, json=doc, headers={"Idempotency-Key": ctx.idempotency_key("post")}
            )
        except httpx.HTTPError as exc:
            raise WebhookError(f"webhook unreachable: {type(exc).__name__}") from exc
        if resp.status_code >= 500 or resp.status_code == 429:
            raise WebhookError(f"webhook answered {resp.status_code}")
        if resp.status_code >= 400:
            raise errors.PermanentError(f"webhook refused the delivery: {resp.status_code}")
        return {"delivered": True, "status": resp.status_code}

    delivery: dict[str, Any] = await ctx.effect("post", post)
    return {
        "ticket_id": ticket.ticket_id,
        "category": answer.get("category"),
        "priority": answer.get("priority"),
        "draft_reply": answer.get("draft_reply"),
        "delivered": delivery.get("delivered", False),
    }


KIND = register(
    Kind(
        name="support.triage",
        payload=Ticket,
        run=run,
        description="Classify a support ticket with a model, draft a reply, post it to a webhook.",
        timeout_seconds=300,
    )
)
