"""demo.agent's Pydantic AI agent: three tools, each an outside call (``agent.apply``),
wrapped in TaskleaseAgent. Imported by ``app.demos.agent`` at a process's first job of
the kind, never when the kind is loaded."""

from __future__ import annotations

from typing import Any

from pydantic_ai import Agent, RunContext
from pydantic_ai.models.openai import OpenAIChatModel
from pydantic_ai.providers.openai import OpenAIProvider
from pydantic_ai.run import AgentRunResult

from app.demos.agent import INSTRUCTIONS, JOB_HEADER, KEY, AgentAnswer, AgentDeps, Turn, apply
from app.integrations.pydantic_ai import TaskleaseAgent
from app.kinds import JobContext

agent = Agent(deps_type=Turn, instructions=INSTRUCTIONS)


# The order the fake model calls them in: agent.TOOLS.
@agent.tool
async def look_up(ctx: RunContext[Turn], topic: str) -> str:
    """Look ``topic`` up in the notes."""
    return await apply(ctx.deps, KEY, "look_up", ctx.tool_call_id, topic)


@agent.tool
async def file_note(ctx: RunContext[Turn], note: str) -> str:
    """File ``note`` (a side effect: it must not happen twice)."""
    return await apply(ctx.deps, KEY, "file_note", ctx.tool_call_id, note)


@agent.tool
async def notify(ctx: RunContext[Turn], message: str) -> str:
    """Tell the question's owner ``message`` (a side effect too)."""
    return await apply(ctx.deps, KEY, "notify", ctx.tool_call_id, message)


durable = TaskleaseAgent(agent)


def model_of(deps: AgentDeps) -> OpenAIChatModel:
    """The process's model, on the deps' AsyncOpenAI client."""
    if KEY not in deps.models:
        provider = OpenAIProvider(openai_client=deps.openai_client())
        deps.models[KEY] = OpenAIChatModel(deps.model_name, provider=provider)
    model: OpenAIChatModel = deps.models[KEY]
    return model


async def answer(ctx: JobContext[AgentDeps], question: str) -> AgentAnswer:
    """The agent's answer to ``question``, every model request and tool call a step."""
    result = await durable.run(
        ctx,
        question,
        key=KEY,
        deps=Turn(ctx),
        model=model_of(ctx.deps),
        model_settings={"extra_headers": {JOB_HEADER: str(ctx.job_id)}},
    )
    return answer_of(result)


def answer_of(result: AgentRunResult[Any]) -> AgentAnswer:
    """The run's answer and the shape of its conversation (what an equal run repeats)."""
    messages = result.all_messages()
    calls = [p.tool_name for m in messages for p in m.parts if p.part_kind == "tool-call"]
    responses = sum(1 for m in messages if m.kind == "response")
    return AgentAnswer(answer=str(result.output), tools=calls, requests=responses)
