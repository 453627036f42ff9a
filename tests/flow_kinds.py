"""A parent kind for the tests of children under flow control by key (issue 35,
tests/integration/test_flow_children.py): it spawns the children its payload lists and
waits for all of them. Loaded through TASKLEASE_KINDS as a user's kinds would be."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any, Literal

from pydantic import BaseModel, Field

from tasklease import JobContext, kind

MODULE = "tests.flow_kinds"


class Child(BaseModel):
    kind: str
    payload: dict[str, Any] = Field(default_factory=dict)


class Spawns(BaseModel):
    children: list[Child] = Field(min_length=1, max_length=10)


@kind("test.flow_parent", timeout_seconds=60)
async def flow_parent(ctx: JobContext[None], p: Spawns) -> dict[str, Any]:
    """Spawn each listed child, then wait for all of them."""
    ids = [await ctx.spawn(f"child-{i}", c.kind, c.payload) for i, c in enumerate(p.children)]
    got = await ctx.gather("children", ids)
    return {"children": ids, "succeeded": len(got.results)}


class Nested(BaseModel):
    conversation: str
    depth: int = Field(0, ge=0, le=5)


@kind("test.flow_nested", key=lambda p: p.conversation, concurrency=1, timeout_seconds=60)
async def flow_nested(ctx: JobContext[None], p: Nested) -> dict[str, Any]:
    """One at a time per conversation, and a child of its own kind and conversation,
    waited on, down to ``depth``: the child runs within its parent's hold of the key."""
    if p.depth == 0:
        return {"depth": 0}
    child = await ctx.spawn(
        "inner", "test.flow_nested", {"conversation": p.conversation, "depth": p.depth - 1}
    )
    await ctx.gather("inner", [child])
    return {"depth": p.depth}


class Report(BaseModel):
    account: str


@kind("test.flow_reject", key=lambda p: p.account, if_active="reject")
async def flow_reject(ctx: JobContext[None], p: Report) -> str:
    """One report per account at a time: a second while one is active is refused."""
    return p.account


class Keyed(BaseModel):
    how: Literal["ok", "raise", "list"]


def _key(p: Keyed) -> Any:
    if p.how == "raise":
        raise ValueError("this payload has no conversation")
    if p.how == "list":
        return ["not", "a", "text"]
    return "k"


@kind("test.flow_bad_key", key=_key, concurrency=1)
async def flow_bad_key(ctx: JobContext[None], p: Keyed) -> str:
    """A key function that fails on some payloads (the submission is refused)."""
    return p.how


@contextlib.contextmanager
def registered() -> Iterator[None]:
    """This module's kinds in this process's registry for one test, taken out after it."""
    from app import kinds

    kinds.REGISTRY.load((MODULE,))
    try:
        yield
    finally:
        for k in (flow_parent, flow_nested, flow_reject, flow_bad_key):
            kinds.REGISTRY.unregister(k.name)
        kinds.REGISTRY._modules.discard(MODULE)
