"""A kind three generations deep, for the job page's child tree (tests/ui/test_charts_page.py):
test.tree spawns a demo.fanout, which spawns demo.nap children, and gathers it. Loaded
through TASKLEASE_KINDS as a user's kinds would be."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field

from tasklease import JobContext, kind

MODULE = "tests.tree_kinds"


class Tree(BaseModel):
    grandchildren: int = Field(2, ge=1, le=10)


@kind("test.tree", timeout_seconds=60)
async def tree(ctx: JobContext[None], p: Tree) -> dict[str, Any]:
    """Spawn one demo.fanout of ``grandchildren`` short naps and wait for it."""
    child = await ctx.spawn(
        "fanout", "demo.fanout", {"children": p.grandchildren, "child_seconds": 0.2}
    )
    got = await ctx.gather("fanout", [child])
    return {"children": 1, "succeeded": len(got.results)}
