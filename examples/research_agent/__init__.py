"""examples.research_agent: a Pydantic AI agent run durably by a job kind.

A research agent with three tools: ``search`` the notes, ``read_page`` one, and
``save_note`` (a side effect: it appends to RESEARCH_AGENT_NOTES, if set). The agent is
written as any Pydantic AI agent is; ``TaskleaseAgent`` runs it inside the kind, so each
model request and each tool call is a recorded step: after a crash the next attempt
replays them and no note is saved twice, no request sent twice.

Start it with ``TASKLEASE_KINDS=examples.research_agent`` (and this folder's parent on
PYTHONPATH). The model: the fake OpenAI-compatible server, started in the worker, by
default; any OpenAI-compatible endpoint with RESEARCH_AGENT_BASE_URL,
RESEARCH_AGENT_API_KEY and RESEARCH_AGENT_MODEL (docs/howto/pydantic-ai.md).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx2
from openai import AsyncOpenAI
from pydantic import BaseModel, ConfigDict, Field
from pydantic_ai import Agent, RunContext
from pydantic_ai.models.openai import OpenAIChatModel
from pydantic_ai.providers.openai import OpenAIProvider

from tasklease import ConfigError, JobContext, Settings, kind
from tasklease.fakemodel import RunningServer, serve_in_thread
from tasklease.pydantic_ai import TaskleaseAgent, messages_from_json, messages_json

PREFIX = "RESEARCH_AGENT_"

# The notes the agent researches: a stand-in for a search index.
PAGES = {
    "leases": "A lease fences a worker: only the holder of the current token records.",
    "effects": "An effect runs once per job: a later attempt returns its record.",
    "queues": "Queues deliver at least once, so a job may run more than once.",
}


class Question(BaseModel):
    model_config = ConfigDict(extra="forbid")

    question: str = Field(min_length=1, max_length=2_000)
    # The messages of an earlier answer (its ``messages``), to continue that conversation.
    history: list[dict[str, Any]] | None = None


class Research(BaseModel):
    answer: str
    messages: list[dict[str, Any]]  # the whole conversation, to continue it later


@dataclass
class ResearchDeps:
    """Built once per worker process: the model and, by default, the fake model server."""

    model: OpenAIChatModel
    http: httpx2.AsyncClient
    notes: Path | None = None
    server: RunningServer | None = None
    calls: list[str] = field(default_factory=list)  # the tool calls this process made

    def called(self, tool: str, arg: str) -> None:
        self.calls.append(tool)
        log = os.environ.get(PREFIX + "TOOL_LOG")
        if log:  # the tests count every process's tool calls here
            with open(log, "a") as fh:
                fh.write(json.dumps({"tool": tool, "arg": arg, "pid": os.getpid()}) + "\n")

    async def aclose(self) -> None:
        await self.http.aclose()
        if self.server is not None:
            self.server.stop()


def _setting(name: str) -> str | None:
    return os.environ.get(PREFIX + name) or None


def build_deps(settings: Settings) -> ResearchDeps:
    base_url = _setting("BASE_URL")
    server = None
    if base_url is None:
        server = serve_in_thread()  # the fake model, in this process
        base_url, api_key, model_name = server.url, "fake-key", "fake-model"
    else:
        api_key = _setting("API_KEY")
        model_name = _setting("MODEL")
        for name, value in (("API_KEY", api_key), ("MODEL", model_name)):
            if value is None:
                raise ConfigError(f"{PREFIX}BASE_URL is set, so {PREFIX}{name} must be too")
    assert api_key is not None
    assert model_name is not None
    return connect(base_url, api_key, model_name, server=server)


def connect(
    base_url: str, api_key: str, model_name: str, *, server: RunningServer | None = None
) -> ResearchDeps:
    """The deps for an OpenAI-compatible endpoint (a test builds them this way too)."""
    http = httpx2.AsyncClient(timeout=60.0)
    # max_retries=0: a 429 reaches tasklease, which retries the job later holding no worker
    # and using no attempt, rather than the SDK waiting in the worker.
    client = AsyncOpenAI(base_url=base_url, api_key=api_key, http_client=http, max_retries=0)
    provider = OpenAIProvider(openai_client=client)
    notes = _setting("NOTES")
    return ResearchDeps(
        model=OpenAIChatModel(model_name, provider=provider),
        http=http,
        notes=Path(notes) if notes else None,
        server=server,
    )


agent = Agent(
    deps_type=ResearchDeps,
    instructions="Answer the question from the notes: search them, read a page, save a note.",
)


@agent.tool
def search(ctx: RunContext[ResearchDeps], query: str) -> list[str]:
    """The names of the pages whose text shares a word with ``query``."""
    ctx.deps.called("search", query)
    words = {w.strip("?.,!").lower() for w in query.split()}
    return [name for name, text in PAGES.items() if words & set(text.lower().split())]


@agent.tool
def read_page(ctx: RunContext[ResearchDeps], page: str) -> str:
    """The text of the page called ``page``."""
    ctx.deps.called("read_page", page)
    found = [text for name, text in PAGES.items() if name.rstrip("s") in page.lower()]
    return found[0] if found else f"no page is called {page!r}; pages: {', '.join(PAGES)}"


@agent.tool
def save_note(ctx: RunContext[ResearchDeps], note: str) -> str:
    """Save ``note`` for later (a side effect: it must not happen twice)."""
    ctx.deps.called("save_note", note)
    if ctx.deps.notes is not None:
        with ctx.deps.notes.open("a") as fh:
            fh.write(note + "\n")
    return "saved"


durable = TaskleaseAgent(agent)


@kind("examples.research", timeout_seconds=300, max_attempts=4, deps=build_deps)
async def research(ctx: JobContext[ResearchDeps], q: Question) -> Research:
    """Answer a question with the research agent, every step recorded."""
    history = messages_from_json(q.history) if q.history else None
    result = await durable.run(
        ctx, q.question, deps=ctx.deps, model=ctx.deps.model, message_history=history
    )
    return Research(answer=result.output, messages=messages_json(result))
