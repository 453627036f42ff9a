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
    fail_at: int | None = Field(
        None, ge=0, description="the step that fails for good (its earlier steps recorded)"
    )


@kind("demo.sleep")
async def sleep(ctx: JobContext[None], p: SleepPayload) -> dict[str, int]:
    """Sleep in steps, one effect per step, saying how far it is after each (its stream
    shows the progress)."""

    def step(i: int) -> Callable[[], Awaitable[int]]:
        async def go() -> int:
            await asyncio.sleep(p.seconds)
            return i

        return go

    done: list[int] = []
    for i in range(p.steps):
        if i == p.fail_at:
            raise errors.PermanentError(f"demo.sleep: step-{i} fails on purpose (fail_at)")
        done.append(await ctx.effect(f"step-{i}", step(i)))
        await ctx.progress((i + 1) / p.steps, f"step {i + 1} of {p.steps}")
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


# --- waits (docs/explain/design.md#waits) ---------------------------------------------------


class NapPayload(BaseModel):
    model_config = ConfigDict(extra="forbid")

    seconds: float = Field(1.0, ge=0, le=366 * 86_400, description="how long to wait")
    naps: int = Field(1, ge=1, le=100, description="waits in a row, each its own timer")


@kind("demo.nap")
async def nap(ctx: JobContext[None], p: NapPayload) -> dict[str, Any]:
    """Wait ``seconds`` holding no worker, ``naps`` times, with an effect after each."""
    woke: list[str] = []
    for i in range(p.naps):
        await ctx.sleep(f"nap-{i}", p.seconds)

        async def note() -> str:
            return ctx.now().isoformat()

        woke.append(await ctx.effect(f"woke-{i}", note))
    return {"naps": p.naps, "woke_at": woke, "runs_replayed": len(ctx.replayed)}


class ApprovalPayload(BaseModel):
    model_config = ConfigDict(extra="forbid")

    timeout_seconds: float = Field(3600.0, gt=0, le=366 * 86_400)
    on_timeout: str = Field("escalate", pattern="^(escalate|fail)$")


@kind("demo.approval")
async def approval(ctx: JobContext[None], p: ApprovalPayload) -> dict[str, Any]:
    """Wait for an outside answer to the callback ``approve`` (its token is logged by the
    notify step); on timeout, escalate (succeed saying so) or fail."""

    async def notify(token: str) -> dict[str, str]:
        ctx.log.info("waiting for approval: POST /v1/callbacks/%s", token)
        return {"notified": "log"}

    try:
        answer = await ctx.wait_for_callback(
            "approve",
            timeout=p.timeout_seconds,
            notify=notify,
            details={"asks": "approve this demo job", "on_timeout": p.on_timeout},
        )
    except errors.CallbackTimedOut:
        if p.on_timeout == "fail":
            raise errors.PermanentError("no approval before the deadline") from None
        return {"approved": False, "escalated": True}
    except errors.CallbackFailed as exc:
        raise errors.PermanentError(str(exc)) from None
    return {"approved": True, "answer": answer}


class FanOutPayload(BaseModel):
    model_config = ConfigDict(extra="forbid")

    children: int = Field(3, ge=1, le=200)
    at_least: int | None = Field(None, ge=0, description="successes needed; default: all")
    tolerate: int | None = Field(None, ge=0)
    fail: list[int] = Field(default_factory=list, description="children that fail for good")
    child_seconds: float = Field(0.0, ge=0, le=3600, description="each child naps this long")


@kind("demo.fanout")
async def fanout(ctx: JobContext[None], p: FanOutPayload) -> dict[str, Any]:
    """Spawn ``children`` child jobs (demo.nap, or demo.flaky for good where ``fail``
    says), then gather them by the rule."""
    kids: list[str] = []
    for i in range(p.children):
        if i in p.fail:
            kids.append(await ctx.spawn(f"child-{i}", "demo.flaky", {"permanent": True}))
        else:
            kids.append(await ctx.spawn(f"child-{i}", "demo.nap", {"seconds": p.child_seconds}))
    got = await ctx.gather(
        "children",
        kids,
        at_least=p.at_least if p.at_least is not None else "all",
        tolerate=p.tolerate,
    )
    return {
        "children": len(kids),
        "succeeded": len(got.results),
        "failed": len(got.errors),
        "unfinished": len(got.unfinished),
    }


# --- published state (docs/howto/job-state.md) -----------------------------------------


@kind("demo.publish")
async def publish(ctx: JobContext[None], p: SleepPayload) -> dict[str, int]:
    """demo.sleep's steps, publishing where it is (``ctx.set_state``): ``phase`` (working,
    then finished) and ``done``, the steps done so far. A re-run after a crash publishes
    what the crashed attempt did again, which changes nothing."""
    await ctx.set_state("phase", "working")
    for i in range(p.steps):

        async def step(i: int = i) -> int:
            await asyncio.sleep(p.seconds)
            return i

        await ctx.effect(f"step-{i}", step)
        await ctx.set_state("done", i + 1)
    await ctx.set_state("phase", "finished")
    return {"steps": p.steps, "replayed": len(ctx.replayed)}
