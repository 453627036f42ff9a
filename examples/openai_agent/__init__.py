"""examples.openai_agent: an OpenAI Agents SDK agent run durably by a job kind.

A ``triage`` agent, guarded by an input guardrail, hands the question off to a
``researcher`` with three tools: ``search`` the notes, ``read_page`` one, and
``save_note`` (a side effect: it appends to OPENAI_AGENT_NOTES, if set). The agents are
written as any OpenAI Agents SDK agents are; ``durable_run`` runs them inside the kind,
so each model response and each tool call is a recorded step: after a crash the next
attempt replays them and no note is saved twice, no request sent twice. A question asked with
``"approve_notes": true`` saves its note only once a person approves it: the job waits
(``waiting``, holding no worker) on callback ``oai:approve:<call id>``, answered with
Approve or Reject in the web view; a rejected note is not saved and the answer says so.

Start it with ``TASKLEASE_KINDS=examples.openai_agent`` (and this folder's parent on
PYTHONPATH). The model: the fake OpenAI-compatible server, started in the worker, by
default; any OpenAI-compatible endpoint (chat completions) with OPENAI_AGENT_BASE_URL,
OPENAI_AGENT_API_KEY and OPENAI_AGENT_MODEL (docs/howto/openai-agents.md).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from typing import Any

from agents import (
    Agent,
    GuardrailFunctionOutput,
    OpenAIChatCompletionsModel,
    RunConfig,
    RunContextWrapper,
    function_tool,
    input_guardrail,
    set_tracing_disabled,
)
from openai import AsyncOpenAI
from pydantic import BaseModel, ConfigDict, Field

from examples import notes
from tasklease import JobContext, Settings, kind
from tasklease.fakemodel import RunningServer
from tasklease.openai_agents import durable_run, items_json

PREFIX = "OPENAI_AGENT_"
# Nothing is sent to OpenAI's trace endpoint (and a replayed step makes no span twice).
set_tracing_disabled(True)


class Question(BaseModel):
    model_config = ConfigDict(extra="forbid")

    question: str = Field(min_length=1, max_length=2_000)
    # The items of an earlier answer (its ``items``), to continue that conversation.
    history: list[dict[str, Any]] | None = None
    # save_note waits for a person's approval (the web view's Approve or Reject).
    approve_notes: bool = False


class Research(BaseModel):
    answer: str
    agent: str  # the agent that answered (the researcher, after the handoff)
    items: list[dict[str, Any]]  # the whole conversation, to continue it later


@dataclass
class AgentDeps:
    """Built once per worker process: the model and, by default, the fake model server."""

    model: OpenAIChatCompletionsModel
    client: AsyncOpenAI
    server: RunningServer | None = None
    tools: notes.Tools = field(default_factory=lambda: notes.tools(PREFIX))
    approve_notes: bool = False  # this run's question asked for approval of its notes

    @property
    def calls(self) -> list[str]:
        """The tool calls this process made."""
        return self.tools.calls

    async def aclose(self) -> None:
        await self.client.close()
        if self.server is not None:
            self.server.stop()


def build_deps(settings: Settings) -> AgentDeps:
    at = notes.endpoint(PREFIX)
    return connect(at.base_url, at.api_key, at.model, server=at.server)


def connect(
    base_url: str, api_key: str, model_name: str, *, server: RunningServer | None = None
) -> AgentDeps:
    """The deps for an OpenAI-compatible endpoint (a test builds them this way too)."""
    # max_retries=0: a 429 reaches tasklease, which retries the job later holding no worker
    # and using no attempt, rather than the SDK waiting in the worker.
    client = AsyncOpenAI(base_url=base_url, api_key=api_key, max_retries=0, timeout=60.0)
    model = OpenAIChatCompletionsModel(model_name, openai_client=client)
    return AgentDeps(model=model, client=client, server=server)


@function_tool
def search(ctx: RunContextWrapper[AgentDeps], query: str) -> list[str]:
    """The names of the pages whose text shares a word with ``query``."""
    return ctx.context.tools.search(query)


@function_tool
def read_page(ctx: RunContextWrapper[AgentDeps], page: str) -> str:
    """The text of the page called ``page``."""
    return ctx.context.tools.read_page(page)


async def notes_need_approval(
    ctx: RunContextWrapper[AgentDeps], params: dict[str, Any], call_id: str
) -> bool:
    return ctx.context.approve_notes


@function_tool(needs_approval=notes_need_approval)
def save_note(ctx: RunContextWrapper[AgentDeps], note: str) -> str:
    """Save ``note`` for later (a side effect: it must not happen twice)."""
    return ctx.context.tools.save_note(note)


@input_guardrail(run_in_parallel=False)
def on_topic(ctx: RunContextWrapper[AgentDeps], agent: Agent[Any], input: Any) -> Any:
    """Refuse a question that asks for a secret, before any model request."""
    text = input if isinstance(input, str) else json.dumps(input)
    return GuardrailFunctionOutput(
        output_info={"checked": len(text)}, tripwire_triggered="password" in text.lower()
    )


researcher: Agent[AgentDeps] = Agent(
    name="researcher",
    instructions="Answer the question from the notes: search them, read a page, save a note.",
    tools=[search, read_page, save_note],
)
triage: Agent[AgentDeps] = Agent(
    name="triage",
    instructions="Hand research questions to the researcher.",
    handoffs=[researcher],
    input_guardrails=[on_topic],
)


@kind("examples.openai_agent", timeout_seconds=300, max_attempts=4, deps=build_deps)
async def research(ctx: JobContext[AgentDeps], q: Question) -> Research:
    """Answer a question with the triage and research agents, every step recorded."""
    prompt: str | list[Any] = q.question
    if q.history:
        prompt = [*q.history, {"role": "user", "content": q.question}]
    result = await durable_run(
        ctx,
        triage,
        prompt,
        context=replace(ctx.deps, approve_notes=q.approve_notes),
        run_config=RunConfig(model=ctx.deps.model, tracing_disabled=True),
        approval_timeout=notes.APPROVAL_TIMEOUT if q.approve_notes else None,
    )
    return Research(
        answer=str(result.final_output), agent=result.last_agent.name, items=items_json(result)
    )
