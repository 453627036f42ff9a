"""demo.revised, version 2: version 1's steps with a review before the draft and a
notice after the nap, each behind ``ctx.patched`` (app/demos/revised.py), so a job
started on version 1 resumes on it."""

from __future__ import annotations

from typing import Any

from app.demos.revised import DRAFT, KIND, NAP, NOTIFY, PUBLISH, REVIEW, RevisedPayload, step
from app.kinds import JobContext, kind


@kind(KIND, version=2)
async def revised(ctx: JobContext[None], p: RevisedPayload) -> dict[str, Any]:
    """Review (new), draft, wait, notify (new), publish: the version deployed half-way."""
    reviewed = await ctx.patched(REVIEW)
    if reviewed:
        await step(ctx, REVIEW)
    await step(ctx, DRAFT)
    await ctx.sleep(NAP, p.nap_seconds)
    notified = await ctx.patched(NOTIFY)
    if notified:
        await step(ctx, NOTIFY)
    await step(ctx, PUBLISH)
    return {"version": "2", "reviewed": reviewed, "notified": notified}
