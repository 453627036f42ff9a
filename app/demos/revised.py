"""demo.revised, a kind deployed in two versions (docs/howto/kind-versions.md): the chaos
gate starts its workers on ``app.demos.revised_v1`` and, half-way through the faults,
restarts them on ``app.demos.revised_v2`` (a deploy), while some of its jobs sleep
between their steps. Neither version is imported by ``app.demos``: a process names the
one it serves in TASKLEASE_KINDS. This module holds what both share."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from app.kinds import JobContext

KIND = "demo.revised"
V1_MODULE, V2_MODULE = "app.demos.revised_v1", "app.demos.revised_v2"
# The steps, each an effect; version 2 adds two behind ctx.patched: "review" before
# "draft" (a job that drafted on version 1 must not take it) and "notify" after the nap
# (a job of version 1 waiting in the nap takes it).
REVIEW, DRAFT, NAP, NOTIFY, PUBLISH = "review", "draft", "nap", "notify", "publish"


class RevisedPayload(BaseModel):
    model_config = ConfigDict(extra="forbid")

    nap_seconds: float = Field(1.0, ge=0, le=3600, description="the wait between the steps")


async def step(ctx: JobContext[None], key: str) -> str:
    """One of the kind's steps: an effect that answers its own name."""

    async def done() -> str:
        return key

    return await ctx.effect(key, done)
