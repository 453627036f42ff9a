"""examples.research_agent: a Pydantic AI agent run durably by a job kind.

A research agent with three tools: ``search`` the notes, ``read_page`` one, and
``save_note`` (a side effect: it appends to RESEARCH_AGENT_NOTES, if set). The agent is
written as any Pydantic AI agent is; ``TaskleaseAgent`` runs it inside the kind, so each
model request and each tool call is a recorded step: after a crash the next attempt
replays them and no note is saved twice, no request sent twice. A question asked with
``"approve_notes": true`` saves its note only once a person approves it: the job waits
(``waiting``, holding no worker) on callback ``pai:approve:<call id>``, answered with
Approve or Reject in the web view; a rejected note is not saved and the answer says so.

Start it with ``TASKLEASE_KINDS=examples.research_agent`` (and this folder's parent on
PYTHONPATH). The model: the fake OpenAI-compatible server, started in the worker, by
default; any OpenAI-compatible endpoint with RESEARCH_AGENT_BASE_URL,
RESEARCH_AGENT_API_KEY and RESEARCH_AGENT_MODEL (docs/howto/pydantic-ai.md).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

import httpx2
from openai import AsyncOpenAI
from pydantic import BaseModel, ConfigDict, Field
from pydantic_ai import Agent, ApprovalRequired, RunContext
from pydantic_ai.models.openai import OpenAIChatModel
from pydantic_ai.providers.openai import OpenAIProvider

from examples import notes
from tasklease import JobContext, Settings, kind
from tasklease.fakemodel import RunningServer
from tasklease.pydantic_ai import TaskleaseAgent, messages_from_json, messages_json

PREFIX = "RESEARCH_AGENT_"
PAGES = notes.PAGES


class Question(BaseModel):
    model_config = ConfigDict(extra="forbid")

    question: str = Field(min_length=1, max_length=2_000)
    # The messages of an earlier answer (its ``messages``), to continue that conversation.
    history: list[dict[str, Any]] | None = None
    # save_note waits for a person's approval (the web view's Approve or Reject).
    approve_notes: bool = False


class Research(BaseModel):
    answer: str
    messages: list[dict[str, Any]]  # the whole conversation, to continue it later


@dataclass
class ResearchDeps:
    """Built once per worker process: the model and, by default, the fake model server."""

    model: OpenAIChatModel
    http: httpx2.AsyncClient
    server: RunningServer | None = None
    tools: notes.Tools = field(default_factory=lambda: notes.tools(PREFIX))
    approve_notes: bool = False  # this run's question asked for approval of its notes

    @property
    def calls(self) -> list[str]:
        """The tool calls this process made."""
        return self.tools.calls

    async def aclose(self) -> None:
        await self.http.aclose()
        if self.server is not None:
            self.server.stop()


def build_deps(settings: Settings) -> ResearchDeps:
    at = notes.endpoint(PREFIX)
    return connect(at.base_url, at.api_key, at.model, server=at.server)


def connect(
    base_url: str, api_key: str, model_name: str, *, server: RunningServer | None = None
) -> ResearchDeps:
    """The deps for an OpenAI-compatible endpoint (a test builds them this way too)."""
    http = httpx2.AsyncClient(timeout=60.0)
    # max_retries=0: a 429 reaches tasklease, which retries the job later holding no worker
    # and using no attempt, rather than the SDK waiting in the worker.
    client = AsyncOpenAI(base_url=base_url, api_key=api_key, http_client=http, max_retries=0)
    provider = OpenAIProvider(openai_client=client)
    return ResearchDeps(
        model=OpenAIChatModel(model_name, provider=provider), http=http, server=server
    )


agent = Agent(
    deps_type=ResearchDeps,
    instructions="Answer the question from the notes: search them, read a page, save a note.",
)


@agent.tool
def search(ctx: RunContext[ResearchDeps], query: str) -> list[str]:
    """The names of the pages whose text shares a word with ``query``."""
    return ctx.deps.tools.search(query)


@agent.tool
def read_page(ctx: RunContext[ResearchDeps], page: str) -> str:
    """The text of the page called ``page``."""
    return ctx.deps.tools.read_page(page)


@agent.tool
def save_note(ctx: RunContext[ResearchDeps], note: str) -> str:
    """Save ``note`` for later (a side effect: it must not happen twice)."""
    if ctx.deps.approve_notes and not ctx.tool_call_approved:
        raise ApprovalRequired  # the run ends; the job waits for a person's answer
    return ctx.deps.tools.save_note(note)


durable = TaskleaseAgent(agent)


@kind("examples.research", timeout_seconds=300, max_attempts=4, deps=build_deps)
async def research(ctx: JobContext[ResearchDeps], q: Question) -> Research:
    """Answer a question with the research agent, every step recorded."""
    history = messages_from_json(q.history) if q.history else None
    result = await durable.run(
        ctx,
        q.question,
        deps=replace(ctx.deps, approve_notes=q.approve_notes),
        model=ctx.deps.model,
        message_history=history,
        approval_timeout=notes.APPROVAL_TIMEOUT if q.approve_notes else None,
    )
    return Research(answer=result.output, messages=messages_json(result))
