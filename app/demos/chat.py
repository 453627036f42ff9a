"""demo.chat: a job a person talks to while it runs (docs/howto/messages.md).

It loops on ``ctx.receive(topic)``: each message is answered once, by an effect, in the
order the messages were sent, whenever they come (before it waits, while it waits, while
it answers the one before, or after its worker died), waiting between them holding no
worker.
"""

from __future__ import annotations

import asyncio
import functools
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from app import errors
from app.kinds import JobContext, kind


class ChatPayload(BaseModel):
    model_config = ConfigDict(extra="forbid")

    messages: int = Field(3, ge=1, le=100, description="messages it answers, then it ends")
    topic: str = Field("user", min_length=1, max_length=100)
    timeout_seconds: float | None = Field(
        None, gt=0, le=366 * 86_400, description="how long it waits for each (none: no limit)"
    )
    work_seconds: float = Field(0.0, ge=0, le=600, description="each answer takes this long")


@kind("demo.chat")
async def chat(ctx: JobContext[None], p: ChatPayload) -> dict[str, Any]:
    """Answer ``messages`` messages on ``topic``, each once and in order (the answer is
    an effect: ``answer-<n>``); with ``timeout_seconds`` and no message by then, end
    saying so."""

    async def answer(message_id: int, body: Any) -> dict[str, Any]:
        await asyncio.sleep(p.work_seconds)
        return {"message": message_id, "reply": f"you said: {body}"}

    answers: list[dict[str, Any]] = []
    for n in range(p.messages):
        try:
            got = await ctx.receive(p.topic, timeout=p.timeout_seconds)
        except errors.ReceiveTimedOut:
            return {"answers": answers, "timed_out": True}
        answers.append(await ctx.effect(f"answer-{n}", functools.partial(answer, got.id, got.body)))
    return {"answers": answers, "timed_out": False}
