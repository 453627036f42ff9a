"""agent.research: agent work that waits, holding no worker while it does.

1. fans out three sub-queries as child jobs (``agent.subquery``, each one model call)
   and gathers any two of them (a third that fails or is slow does not hold it up);
2. drafts a summary (a streamed model answer, ctx.generate);
3. waits for a person to approve it: the notify posts the callback's token and the
   URL that answers it to the webhook; no answer before the timeout escalates (an
   effect that tells the webhook) and the job ends saying so;
4. sleeps until the quiet hour (the payload's, or a few seconds for the demo);
5. "posts" the summary to the webhook (an effect, with an Idempotency-Key).

Every step is recorded: the job's code runs again from the top after each wait and
returns the recorded results, so no model call, notice or post is repeated. The kinds
share support.triage's deps (its model and webhook client).
"""

from __future__ import annotations

import datetime as dt
import zoneinfo
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from app import errors
from app.demos.triage import TriageDeps, build_deps, deliver, providers
from app.kinds import JobContext, kind

QUERIES = 3  # sub-queries fanned out
NEEDED = 2  # answers gathered before drafting


class ResearchRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    topic: str = Field(min_length=1, max_length=500, description="what to research")
    queries: list[str] | None = Field(
        None,
        min_length=QUERIES,
        max_length=QUERIES,
        description="the three sub-queries; default: three angles on the topic",
    )
    approval_timeout_seconds: float = Field(
        3600.0, gt=0, le=366 * 86_400, description="how long a person has to approve"
    )
    quiet_hour: int | None = Field(
        None, ge=0, le=23, description="post at the next HH:00 in `timezone`"
    )
    timezone: str = Field("UTC", description="the quiet hour's time zone (IANA name)")
    post_delay_seconds: float = Field(
        5.0, ge=0, le=366 * 86_400, description="without quiet_hour: post this long after"
    )
    callback_base_url: str | None = Field(
        None,
        pattern=r"^https?://[^\s/]+(/[^\s]*)?$",
        max_length=2000,
        description="the API's base URL, for the approve link in the notice",
    )

    @field_validator("queries")
    @classmethod
    def _queries(cls, value: list[str] | None) -> list[str] | None:
        if value is not None:
            for i, q in enumerate(value):
                if not q.strip() or len(q) > 500:
                    raise ValueError(f"query {i} must be 1 to 500 characters, not blank")
        return value

    @field_validator("timezone")
    @classmethod
    def _timezone(cls, value: str) -> str:
        try:
            zoneinfo.ZoneInfo(value)
        except (zoneinfo.ZoneInfoNotFoundError, ValueError):
            raise ValueError(
                f"unknown time zone {value!r} (an IANA name, e.g. Europe/Paris)"
            ) from None
        return value

    def sub_queries(self) -> list[str]:
        return self.queries or [
            f"{self.topic}: background",
            f"{self.topic}: recent developments",
            f"{self.topic}: open questions",
        ]

    def quiet_time(self, now: dt.datetime) -> dt.datetime:
        """When to post, from ``now``: the next quiet hour, or ``post_delay_seconds`` on."""
        if self.quiet_hour is None:
            return now + dt.timedelta(seconds=self.post_delay_seconds)
        local = now.astimezone(zoneinfo.ZoneInfo(self.timezone))
        at = local.replace(hour=self.quiet_hour, minute=0, second=0, microsecond=0)
        if at <= local:
            at += dt.timedelta(days=1)
        return at


class ResearchResult(BaseModel):
    topic: str
    status: Literal["posted", "escalated", "rejected"]
    summary: str
    answered: int  # sub-queries that answered before the gather held
    failed: int  # sub-queries that failed (tolerated)
    approval: Any = None  # the person's answer, as given
    posted_at: str | None = None


class SubQuery(BaseModel):
    model_config = ConfigDict(extra="forbid")

    topic: str = Field(min_length=1, max_length=500)
    query: str = Field(min_length=1, max_length=500)


@kind("agent.subquery", timeout_seconds=120, deps=build_deps)
async def subquery(ctx: JobContext[TriageDeps], q: SubQuery) -> dict[str, Any]:
    """One sub-query of agent.research: one call to the model, recorded."""
    model, key = ctx.deps.model, ctx.idempotency_key("model")
    answer: dict[str, Any] = await ctx.model_call(
        "model",
        lambda: model.triage(
            subject=q.query, body=f"Research topic: {q.topic}", idempotency_key=key
        ),
        budget=model.budget_name("triage"),
        tokens=providers.estimate_tokens(q.query, q.topic),
    )
    return {"query": q.query, "finding": answer.get("draft_reply"), "model": answer.get("model")}


@kind("agent.research", timeout_seconds=300, deps=build_deps)
async def research(ctx: JobContext[TriageDeps], p: ResearchRequest) -> ResearchResult:
    """Fan out three sub-queries, gather two, draft, wait for approval, post at a quiet hour."""
    queries = p.sub_queries()
    children = [
        await ctx.spawn(f"query-{i}", "agent.subquery", {"topic": p.topic, "query": q})
        for i, q in enumerate(queries)
    ]
    try:
        got = await ctx.gather("answers", children, at_least=NEEDED)
    except errors.GatherFailed as exc:
        # The recorded outcome fails the same way on every attempt: do not retry it.
        raise errors.PermanentError(str(exc)) from None

    found = [got.results[c] for c in children if c in got.results]
    lines = [f"Research on {p.topic}: {len(found)} of {len(children)} sub-queries."]
    lines += [f"- {f.get('query')}: {f.get('finding')}" for f in found]
    prompt = "Summarise these findings in a short paragraph.\n" + "\n".join(lines)
    model, draft_key = ctx.deps.model, ctx.idempotency_key("draft-text")
    # Streamed: readers of the job's stream watch the summary being written, and a
    # crash mid-draft continues it from the chunks recorded. (Not the key "draft": a job
    # that recorded its draft before it was streamed holds another shape under that one.)
    written = await ctx.generate(
        "draft-text",
        lambda partial: model.generate(prompt, partial=partial, idempotency_key=draft_key),
        budget=model.budget_name("generate"),
        tokens=providers.estimate_tokens(prompt),
    )
    summary = "\n".join(lines) + "\n\n" + written
    result = ResearchResult(
        topic=p.topic,
        status="rejected",
        summary=summary,
        answered=len(got.results),
        failed=len(got.errors),
    )

    async def notify(token: str) -> dict[str, Any]:
        path = f"/v1/callbacks/{token}"
        doc = {
            "event": "approval_requested",
            "job_id": str(ctx.job_id),
            "kind": ctx.kind,
            "callback": "approve",
            "token": token,
            "approve_url": (p.callback_base_url or "").rstrip("/") + path,
            "answer_with": {"result": {"approved": True}},
            "timeout_seconds": p.approval_timeout_seconds,
            "summary": summary,
        }
        key = ctx.idempotency_key("notify:approve")
        return await deliver(ctx.deps, doc, idempotency_key=key)

    try:
        answer = await ctx.wait_for_callback(
            "approve", timeout=p.approval_timeout_seconds, notify=notify
        )
    except errors.CallbackTimedOut:

        async def escalate() -> dict[str, Any]:
            doc = {
                "event": "escalated",
                "job_id": str(ctx.job_id),
                "kind": ctx.kind,
                "reason": f"no approval within {p.approval_timeout_seconds:g} s",
                "summary": summary,
            }
            sent = await deliver(ctx.deps, doc, idempotency_key=ctx.idempotency_key("escalate"))
            return {"escalated_at": ctx.now().isoformat(), **sent}

        await ctx.effect("escalate", escalate)
        ctx.log.warning("no approval before the deadline: escalated")
        return result.model_copy(update={"status": "escalated"})
    except errors.CallbackFailed as exc:
        return result.model_copy(update={"approval": {"error": str(exc)}})
    if not (isinstance(answer, dict) and answer.get("approved") is True):
        return result.model_copy(update={"approval": answer})

    await ctx.sleep("quiet-hour", until=p.quiet_time(ctx.now()))

    async def post() -> dict[str, Any]:
        doc = {"event": "published", "job_id": str(ctx.job_id), "summary": summary}
        sent = await deliver(ctx.deps, doc, idempotency_key=ctx.idempotency_key("post"))
        return {"posted_at": ctx.now().isoformat(), **sent}

    posted: dict[str, Any] = await ctx.effect("post", post)
    return result.model_copy(
        update={"status": "posted", "approval": answer, "posted_at": posted["posted_at"]}
    )
