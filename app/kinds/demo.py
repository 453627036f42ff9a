"""Small kinds for tests and demos: steps of effects, failures on purpose, nothing."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from app import errors
from app.kinds import JobContext, kind


class SleepPayload(BaseModel):
    model_config = ConfigDict(extra="forbid")

    seconds: float = Field(0.0, ge=0, le=3600)
    steps: int = Field(1, ge=1, le=1000)


@kind("demo.sleep")
async def sleep(ctx: JobContext[None], p: SleepPayload) -> dict[str, int]:
    """Sleep in steps, one effect per step."""

    def step(i: int) -> Callable[[], Awaitable[int]]:
        async def go() -> int:
            await asyncio.sleep(p.seconds)
            return i

        return go

    done: list[int] = [await ctx.effect(f"step-{i}", step(i)) for i in range(p.steps)]
    return {"steps": len(done), "replayed": len(ctx.replayed)}


class FlakyPayload(BaseModel):
    model_config = ConfigDict(extra="forbid")

    fail_attempts: int = Field(1, ge=0, le=100, description="attempts that fail before success")
    permanent: bool = False


class FlakyError(errors.JobError):
    """demo.flaky failed on purpose."""


@kind("demo.flaky")
async def flaky(ctx: JobContext[None], p: FlakyPayload) -> dict[str, int]:
    """Fail the first N attempts, then succeed."""
    if p.permanent:
        raise errors.PermanentError("demo.flaky: permanent failure on purpose")
    if ctx.attempt <= p.fail_attempts:
        raise FlakyError(f"demo.flaky: attempt {ctx.attempt} fails on purpose")
    return {"succeeded_on_attempt": ctx.attempt}


class NoopPayload(BaseModel):
    model_config = ConfigDict(extra="allow")


@kind("demo.noop")
async def noop(ctx: JobContext[None], p: NoopPayload) -> dict[str, Any]:
    """Do nothing; for benchmarks."""
    return {"ok": True}
