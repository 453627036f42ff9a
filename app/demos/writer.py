"""demo.write: one streamed model answer (``ctx.generate``), for tests, the chaos gate
and the web view. Its readers watch the text arrive as ``chunk`` events; a worker that
dies mid-answer leaves the next attempt to continue it from the chunks recorded."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from app.demos.triage import TriageDeps, build_deps
from app.kinds import JobContext, kind

KEY = "answer"


class WritePayload(BaseModel):
    model_config = ConfigDict(extra="forbid")

    prompt: str = Field(min_length=1, max_length=2000)
    words: int = Field(60, ge=1, le=5000, description="the fake model's answer length")


class Written(BaseModel):
    text: str
    chars: int


@kind("demo.write", timeout_seconds=300, deps=build_deps)
async def write(ctx: JobContext[TriageDeps], p: WritePayload) -> Written:
    """Stream one model answer to ``prompt``; the result is the whole text."""
    model, key = ctx.deps.model, ctx.idempotency_key(KEY)
    text = await ctx.generate(
        KEY,
        lambda partial: model.generate(
            p.prompt, partial=partial, idempotency_key=key, words=p.words
        ),
    )
    return Written(text=text, chars=len(text))
