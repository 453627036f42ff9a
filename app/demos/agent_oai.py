"""demo.openai_agent's OpenAI Agents SDK agent: the same three tools as demo.agent's,
each an outside call (``agent.apply``), run by ``durable_run``. Imported by
``app.demos.agent`` at a process's first job of the kind, never when the kind is loaded."""

from __future__ import annotations

from agents import (
    Agent,
    ModelSettings,
    OpenAIChatCompletionsModel,
    RunConfig,
    RunResult,
    function_tool,
    set_tracing_disabled,
)
from agents.items import ToolCallItem
from agents.tool_context import ToolContext

from app.demos.agent import (
    INSTRUCTIONS,
    JOB_HEADER,
    OPENAI_KEY,
    AgentAnswer,
    AgentDeps,
    Turn,
    apply,
)
from app.integrations.openai_agents import durable_run
from app.kinds import JobContext

set_tracing_disabled(True)  # nothing is sent to OpenAI's trace endpoint


# The order the fake model calls them in: agent.TOOLS.
@function_tool
async def look_up(ctx: ToolContext[Turn], topic: str) -> str:
    """Look ``topic`` up in the notes."""
    return await apply(ctx.context, OPENAI_KEY, "look_up", ctx.tool_call_id, topic)


@function_tool
async def file_note(ctx: ToolContext[Turn], note: str) -> str:
    """File ``note`` (a side effect: it must not happen twice)."""
    return await apply(ctx.context, OPENAI_KEY, "file_note", ctx.tool_call_id, note)


@function_tool
async def notify(ctx: ToolContext[Turn], message: str) -> str:
    """Tell the question's owner ``message`` (a side effect too)."""
    return await apply(ctx.context, OPENAI_KEY, "notify", ctx.tool_call_id, message)


agent: Agent[Turn] = Agent(
    name="assistant", instructions=INSTRUCTIONS, tools=[look_up, file_note, notify]
)


def model_of(deps: AgentDeps) -> OpenAIChatCompletionsModel:
    """The process's model, on the deps' AsyncOpenAI client."""
    if OPENAI_KEY not in deps.models:
        client = deps.openai_client()
        deps.models[OPENAI_KEY] = OpenAIChatCompletionsModel(deps.model_name, openai_client=client)
    model: OpenAIChatCompletionsModel = deps.models[OPENAI_KEY]
    return model


async def answer(ctx: JobContext[AgentDeps], question: str) -> AgentAnswer:
    """The agent's answer to ``question``, every model response and tool call a step."""
    settings = ModelSettings(extra_headers={JOB_HEADER: str(ctx.job_id)})
    config = RunConfig(model=model_of(ctx.deps), model_settings=settings, tracing_disabled=True)
    result = await durable_run(
        ctx, agent, question, key=OPENAI_KEY, run_config=config, context=Turn(ctx)
    )
    return answer_of(result)


def answer_of(result: RunResult) -> AgentAnswer:
    """The run's answer and the shape of its conversation (what an equal run repeats)."""
    calls = [
        str(getattr(i.raw_item, "name", ""))
        for i in result.new_items
        if isinstance(i, ToolCallItem)
    ]
    return AgentAnswer(
        answer=str(result.final_output), tools=calls, requests=len(result.raw_responses)
    )
