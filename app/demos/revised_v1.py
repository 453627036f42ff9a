"""demo.revised, version 1: draft, nap, publish (app/demos/revised.py)."""

from __future__ import annotations

from app.demos.revised import DRAFT, KIND, NAP, PUBLISH, RevisedPayload, step
from app.kinds import JobContext, kind


@kind(KIND, version=1)
async def revised(ctx: JobContext[None], p: RevisedPayload) -> dict[str, str]:
    """Draft, wait, publish: the version the chaos gate starts on."""
    await step(ctx, DRAFT)
    await ctx.sleep(NAP, p.nap_seconds)
    await step(ctx, PUBLISH)
    return {"version": "1"}
