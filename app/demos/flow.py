"""Kinds with flow control by key (docs/howto/flow-control.md): a conversation's replies
one at a time and in order, a document's re-index debounced, an integration's syncs
rate-limited; and demo.turn, one at a time per key when given one (the bench's keyed
phase: bench/keyed.py)."""

from __future__ import annotations

import asyncio
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from app.kinds import JobContext, kind


class Message(BaseModel):
    model_config = ConfigDict(extra="forbid")

    conversation: str = Field(min_length=1, max_length=200)
    text: str = Field("", max_length=10_000)
    seconds: float = Field(0.2, ge=0, le=600, description="how long the reply takes")
    wait_seconds: float = Field(
        0.0, ge=0, le=86_400, description="a timer the run waits on, holding its key"
    )


@kind("demo.converse", key=lambda p: p.conversation, concurrency=1)
async def converse(ctx: JobContext[None], p: Message) -> dict[str, Any]:
    """Reply to one message of a conversation: one run per conversation at a time, in the
    order the messages came (a second message waits; it never writes to the thread while
    the first does). Its steps record when the reply started and ended."""

    async def now() -> str:
        return ctx.now().isoformat()

    started = await ctx.effect("started", now)
    if p.wait_seconds:
        await ctx.sleep("pause", p.wait_seconds)

    async def reply() -> str:
        await asyncio.sleep(p.seconds)
        return f"re: {p.text}"

    text = await ctx.effect("reply", reply)
    ended = await ctx.effect("ended", now)
    return {"text": text, "started_at": started, "ended_at": ended}


class Document(BaseModel):
    model_config = ConfigDict(extra="forbid")

    document: str = Field(min_length=1, max_length=200)
    revision: int = Field(0, ge=0)


@kind("demo.reindex", key=lambda p: p.document, debounce_seconds=2.0)
async def reindex(ctx: JobContext[None], p: Document) -> dict[str, Any]:
    """Re-index a document after its edits settle: of a burst of edits, only the last
    one's job runs, 2 s after it (the earlier ones end cancelled, naming it)."""

    async def index() -> int:
        return p.revision

    return {"document": p.document, "indexed_revision": await ctx.effect("index", index)}


class Sync(BaseModel):
    model_config = ConfigDict(extra="forbid")

    integration: str = Field(min_length=1, max_length=200)
    n: int = 0


@kind("demo.sync", key=lambda p: p.integration, rate=(2, 1.0))
async def sync(ctx: JobContext[None], p: Sync) -> dict[str, Any]:
    """Call a customer's integration: at most 2 starts a second per integration."""

    async def call() -> str:
        return ctx.now().isoformat()

    return {"n": p.n, "called_at": await ctx.effect("call", call)}


class Turn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    key: str | None = Field(None, min_length=1, max_length=200, description="None: no key")
    n: int = 0


@kind("demo.turn", key=lambda p: p.key, concurrency=1)
async def turn(ctx: JobContext[None], p: Turn) -> dict[str, Any]:
    """Do nothing, one job of a key at a time; with no key in its payload, a job of no key
    (as demo.noop): the bench's keyed phase runs the same jobs both ways."""
    return {"n": p.n}
