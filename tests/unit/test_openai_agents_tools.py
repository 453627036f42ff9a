"""The ways an OpenAI Agents SDK run reaches its models and tools, each made a step by
durable_run: parallel tool calls recorded by their call ids, a ``Handoff`` object (not
an agent) with its callback, the agent's own model, and a model named through a
provider. An in-memory model: the fake server calls one tool at a time."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from agents import Agent, RunConfig, Usage, function_tool, handoff
from agents.items import ModelResponse
from agents.models.interface import Model, ModelProvider
from openai.types.responses import (
    ResponseFunctionToolCall,
    ResponseOutputMessage,
    ResponseOutputText,
)

from examples.openai_agent import Question
from tasklease import JobContext, kind
from tasklease.openai_agents import durable_run
from tasklease.testing import run_kind
from tests.unit.test_openai_agents import QUESTION

pytestmark = pytest.mark.unit


def call(name: str, call_id: str, **args: Any) -> ResponseFunctionToolCall:
    return ResponseFunctionToolCall(
        type="function_call", name=name, call_id=call_id, arguments=json.dumps(args)
    )


def said(text: str) -> ResponseOutputMessage:
    content = ResponseOutputText(type="output_text", text=text, annotations=[])
    return ResponseOutputMessage(
        type="message", id="m", role="assistant", status="completed", content=[content]
    )


class Scripted(Model):
    """Answers turn ``n`` with ``turns[n](input)``; counts the requests it was sent."""

    def __init__(self, *turns: Any) -> None:
        self.turns = turns
        self.sent = 0

    async def get_response(self, *args: Any, **kwargs: Any) -> ModelResponse:
        given = kwargs["input"] if "input" in kwargs else args[1]
        outputs = [
            o for o in given if isinstance(o, dict) and o.get("type") == "function_call_output"
        ]
        turn = self.turns[min(self.sent, len(self.turns) - 1)]
        self.sent += 1
        usage = Usage(requests=1, input_tokens=10, output_tokens=2, total_tokens=12)
        return ModelResponse(output=turn(outputs), usage=usage, response_id=None)

    def stream_response(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError


def joined(outputs: list[dict[str, Any]]) -> list[Any]:
    return [said(" ".join(sorted(str(o["output"]) for o in outputs)))]


@pytest.mark.parametrize("crash_after", [2, 3])
@pytest.mark.asyncio
async def test_parallel_tool_calls_are_steps_by_their_call_ids_whatever_order_they_end(
    crash_after: int,
) -> None:
    calls: list[str] = []

    @function_tool
    async def slow(n: int) -> str:
        calls.append("slow")
        await asyncio.sleep(0.05)
        return f"slow{n}"

    @function_tool
    async def fast(n: int) -> str:
        calls.append("fast")
        return f"fast{n}"

    model = Scripted(lambda _: [call("slow", "c1", n=1), call("fast", "c2", n=2)], joined)
    agent: Agent[Any] = Agent(name="two", tools=[slow, fast], model=model)  # its own model

    @kind("test.oai.parallel", timeout_seconds=60)
    async def both(ctx: JobContext[None], q: Question) -> str:
        return str((await durable_run(ctx, agent, "go")).final_output)

    done = await run_kind(both, QUESTION, deps=None, crash_after_effect=crash_after)
    assert done.result == "fast2 slow1"
    recorded = [k for k in done.effects if ":tool:" in k]
    assert recorded == ["oai:tool:fast:c2", "oai:tool:slow:c1"]  # in the order they ended
    assert done.crashed_after == recorded[crash_after - 2]
    # Crashed once the fast one was recorded, the slow one was still running: it runs again
    # (nothing of it was recorded); once both were recorded, neither does.
    assert sorted(calls) == (["fast", "slow", "slow"] if crash_after == 2 else ["fast", "slow"])
    assert model.sent == 2  # two responses, over both attempts: none asked for twice


@pytest.mark.asyncio
async def test_a_handoff_object_s_target_runs_its_tools_as_steps_and_its_callback_again() -> None:
    paid: list[int] = []
    handed: list[str] = []

    @function_tool
    def pay(amount: int) -> str:
        paid.append(amount)
        return f"paid {amount}"

    model = Scripted(
        lambda _: [call("transfer_to_payer", "h1")],
        lambda _: [call("pay", "p1", amount=3)],
        joined,
    )
    payer: Agent[Any] = Agent(name="payer", tools=[pay])
    desk: Agent[Any] = Agent(
        name="desk",
        handoffs=[handoff(payer, on_handoff=lambda ctx: handed.append("payer"))],
    )
    payer.handoffs = [desk]  # a cycle: the run's copies follow it once

    class Named(ModelProvider):
        def get_model(self, model_name: str | None) -> Model:
            assert model_name == "scripted"
            return model

    config = RunConfig(model="scripted", model_provider=Named(), tracing_disabled=True)

    @kind("test.oai.handoff", timeout_seconds=60)
    async def desk_kind(ctx: JobContext[None], q: Question) -> str:
        result = await durable_run(ctx, desk, "pay it", run_config=config)
        return f"{result.last_agent.name}: {result.final_output}"

    done = await run_kind(desk_kind, QUESTION, deps=None, crash_after_effect=3)
    assert done.result == 'payer: paid 3 {"assistant": "payer"}'  # the tool's, the handoff's
    assert done.ran == ["oai:model:0", "oai:model:1", "oai:tool:pay:p1", "oai:model:2"]
    assert paid == [3]  # once, over both attempts
    assert handed == ["payer", "payer"]  # agent code between steps: run on each attempt
    assert model.sent == 3
    assert payer.tools == [pay] and desk.handoffs[0].agent_name == "payer"  # unchanged
