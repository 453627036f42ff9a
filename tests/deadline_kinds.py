"""Kinds for the tests of a run's deadline (tests/integration/test_deadlines.py and
tests/e2e/test_deadline_crash.py), loaded through TASKLEASE_KINDS as a user's would be."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator
from typing import Any

from pydantic import BaseModel, Field

from tasklease import JobContext, kind


class Parent(BaseModel):
    child_seconds: float = Field(600.0, gt=0)  # the child naps this long (waiting)
    callback_seconds: float = Field(3600.0, gt=0)


@kind("test.deadline_parent", timeout_seconds=60)
async def deadline_parent(ctx: JobContext[None], p: Parent) -> dict[str, Any]:
    """Spawn a child that naps, then wait for an answer to the callback ``answer``."""
    await ctx.spawn("napper", "demo.nap", {"seconds": p.child_seconds})
    answer = await ctx.wait_for_callback("answer", timeout=p.callback_seconds)
    return {"answer": answer}


class Busy(BaseModel):
    seconds: float = Field(600.0, gt=0)


@kind("test.deadline_busy", timeout_seconds=900)
async def deadline_busy(ctx: JobContext[None], p: Busy) -> dict[str, Any]:
    """Spawn a child that naps, then run (holding the worker) for ``seconds``."""
    await ctx.spawn("napper", "demo.nap", {"seconds": 600})
    await ctx.effect("started", lambda: {"started": True})
    await ctx.effect("work", lambda: _work(p.seconds))
    return {"done": True}


async def _work(seconds: float) -> dict[str, bool]:
    await asyncio.sleep(seconds)
    return {"worked": True}


class Nothing(BaseModel):
    pass


@kind("test.deadline_default", deadline_seconds=120)
async def deadline_default(ctx: JobContext[None], p: Nothing) -> dict[str, Any]:
    """A kind whose jobs have a deadline by default (120 s)."""
    return {}


MODULE = "tests.deadline_kinds"


@contextlib.contextmanager
def registered() -> Iterator[None]:
    """This module's kinds in this process's registry for one test (a worker process loads
    them through TASKLEASE_KINDS), taken out again after it."""
    from app import kinds

    kinds.REGISTRY.load((MODULE,))
    try:
        yield
    finally:
        for k in (deadline_parent, deadline_busy, deadline_default):
            kinds.REGISTRY.unregister(k.name)
        kinds.REGISTRY._modules.discard(MODULE)
