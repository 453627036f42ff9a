"""A parent kind for the tests of children under flow control by key (issue 35,
tests/integration/test_flow_children.py): it spawns the children its payload lists and
waits for all of them. Loaded through TASKLEASE_KINDS as a user's kinds would be."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

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


@contextlib.contextmanager
def registered() -> Iterator[None]:
    """This module's kind in this process's registry for one test, taken out after it."""
    from app import kinds

    kinds.REGISTRY.load((MODULE,))
    try:
        yield
    finally:
        kinds.REGISTRY.unregister(flow_parent.name)
        kinds.REGISTRY._modules.discard(MODULE)
