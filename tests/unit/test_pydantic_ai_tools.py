"""A Pydantic AI agent's tools as TaskleaseAgent's steps: a ModelRetry recorded and raised
again on replay, and parallel tool calls recorded by their call ids."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from pydantic_ai import Agent, ModelRetry
from pydantic_ai.messages import (
    ModelMessage,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel

from examples import research_agent
from examples.research_agent import ResearchDeps
from tasklease import JobContext, kind
from tasklease.fakemodel import RunningServer
from tasklease.pydantic_ai import TaskleaseAgent, messages_json
from tasklease.testing import run_kind
from tests.unit.test_pydantic_ai import QUESTION, deps_for, server

pytestmark = pytest.mark.unit
__all__ = ["server"]  # the fixture, used by name


@pytest.mark.asyncio
async def test_a_tool_s_model_retry_is_recorded_and_raised_again_on_replay_not_rerun(
    server: RunningServer,
) -> None:
    calls: list[str] = []
    agent: Agent[None, str] = Agent(instructions="Check the ledger.")

    @agent.tool_plain
    def ledger(account: str) -> str:
        calls.append(account)
        raise ModelRetry(f"no account {account!r}; ask for another")

    durable = TaskleaseAgent(agent)

    @kind("test.pai.retry", timeout_seconds=60)
    async def check(ctx: JobContext[ResearchDeps], q: research_agent.Question) -> list[Any]:
        result = await durable.run(ctx, q.question, model=ctx.deps.model)
        return messages_json(result)

    deps = deps_for(server)
    try:
        done = await run_kind(check, QUESTION, deps=deps, crash_after_effect=3)
    finally:
        await deps.aclose()
    assert done.crashed_after == "pai:tool:ledger:call_1_ledger"
    assert done.effects["pai:tool:ledger:call_1_ledger"]["kind"] == "model_retry"
    assert calls == ["account: How often does an effect run?"]  # once, over both attempts
    returns = [p for m in done.result for p in m["parts"] if p["part_kind"] == "tool-return"]
    assert [(p["tool_name"], p["outcome"]) for p in returns] == [("ledger", "retried")]
    assert returns[0]["content"].startswith("no account")


@pytest.mark.parametrize("crash_after", [3, 4])
@pytest.mark.asyncio
async def test_parallel_tool_calls_are_steps_by_their_call_ids_whatever_order_they_end(
    crash_after: int,
) -> None:
    """A response with two tool calls runs them concurrently, the slower one last: each
    is recorded under its call id, so a replay finds it whichever finished first. (An
    in-memory FunctionModel: the fake server calls one tool at a time.)"""
    calls: list[str] = []

    def two_at_once(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        returns = [p for m in messages for p in m.parts if isinstance(p, ToolReturnPart)]
        if not returns:
            return ModelResponse(
                parts=[
                    ToolCallPart("slow", {"n": 1}, tool_call_id="c1"),
                    ToolCallPart("fast", {"n": 2}, tool_call_id="c2"),
                ]
            )
        return ModelResponse(parts=[TextPart(" ".join(sorted(str(p.content) for p in returns)))])

    agent: Agent[None, str] = Agent(FunctionModel(two_at_once, model_name="two"))

    @agent.tool_plain
    async def slow(n: int) -> str:
        calls.append("slow")
        await asyncio.sleep(0.05)
        return f"slow{n}"

    @agent.tool_plain
    async def fast(n: int) -> str:
        calls.append("fast")
        return f"fast{n}"

    durable = TaskleaseAgent(agent)

    @kind("test.pai.parallel", timeout_seconds=60)
    async def both(ctx: JobContext[None], q: research_agent.Question) -> str:
        return (await durable.run(ctx, q.question)).output

    done = await run_kind(both, QUESTION, deps=None, crash_after_effect=crash_after)
    assert done.result == "fast2 slow1"
    recorded = [k for k in done.effects if ":tool:" in k]
    assert recorded == ["pai:tool:fast:c2", "pai:tool:slow:c1"]  # in the order they ended
    assert done.crashed_after == recorded[crash_after - 3]
    # Crashed once the fast one was recorded, the slow one was still running: it runs again
    # (nothing of it was recorded); once both were recorded, neither does.
    assert sorted(calls) == (["fast", "slow", "slow"] if crash_after == 3 else ["fast", "slow"])
