"""demo.agent's Pydantic AI agent: three tools, each an outside call (``agent.apply``),
wrapped in TaskleaseAgent. Imported by ``app.demos.agent`` at a process's first job,
never when the kind is loaded."""

from __future__ import annotations

import pydantic_ai.models.openai  # noqa: F401 - for agent.model_of, imported off the loop
from pydantic_ai import Agent, RunContext

from app.demos.agent import Turn, apply
from app.integrations.pydantic_ai import TaskleaseAgent

agent = Agent(
    deps_type=Turn,
    instructions="Look the question up, file a note about it, then notify its owner.",
)


# The order the fake model calls them in: agent.TOOLS.
@agent.tool
async def look_up(ctx: RunContext[Turn], topic: str) -> str:
    """Look ``topic`` up in the notes."""
    return await apply(ctx, "look_up", topic)


@agent.tool
async def file_note(ctx: RunContext[Turn], note: str) -> str:
    """File ``note`` (a side effect: it must not happen twice)."""
    return await apply(ctx, "file_note", note)


@agent.tool
async def notify(ctx: RunContext[Turn], message: str) -> str:
    """Tell the question's owner ``message`` (a side effect too)."""
    return await apply(ctx, "notify", message)


durable = TaskleaseAgent(agent)
