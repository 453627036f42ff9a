"""demo.agent and demo.openai_agent: an agent run durably, by Pydantic AI
(``tasklease.pydantic_ai.TaskleaseAgent``) and by the OpenAI Agents SDK
(``tasklease.openai_agents.durable_run``): the chaos gate's agent kinds. Not among
``app.demos``'s kinds: the gate names this module in TASKLEASE_KINDS itself
(``app.demos,app.demos.agent``), and they need the ``pydantic-ai`` and
``openai-agents`` extras, which the runtime does not.

Each agent has the same three tools, each an outside call: it posts what it did to the
webhook (support.triage's ``deliver``) with the Idempotency-Key of its step, so the
receiver's log counts how often each tool call was applied. Their answers depend on
their arguments only, so with the deterministic fake model (``app.tools.fakemodel``) a
run interrupted anywhere ends with the answer an uninterrupted one gives.

The model: an OpenAI-compatible endpoint at DEMO_AGENT_BASE_URL (the chaos run starts
the fake model server and sets it), DEMO_AGENT_MODEL (default ``fake-model``) and
DEMO_AGENT_API_KEY (default ``fake-key``). Each request carries the job's id in the
``X-Tasklease-Job`` header, which the fake model logs. A framework is imported at the
first job of its kind a process runs (app.demos.agent_pai, app.demos.agent_oai; on a
thread: it takes a second or two), not when the kinds are loaded: the API and the
sweeper load this module and never run it.
"""

from __future__ import annotations

import asyncio
import functools
import importlib
import os
import zlib
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from app import errors
from app.demos.triage import TriageDeps, deliver
from app.demos.triage import build_deps as triage_deps
from app.kinds import JobContext, kind
from app.settings.config import Settings

KIND = "demo.agent"  # Pydantic AI
KEY = "pai"  # its steps' prefix: <KEY>:model:<n>, <KEY>:tool:<name>:<call id>
OPENAI_KIND = "demo.openai_agent"  # the OpenAI Agents SDK
OPENAI_KEY = "oai"
TOOLS = ("look_up", "file_note", "notify")  # the order the fake model calls them in
INSTRUCTIONS = "Look the question up, file a note about it, then notify its owner."
JOB_HEADER = "X-Tasklease-Job"


class AgentQuestion(BaseModel):
    model_config = ConfigDict(extra="forbid")

    question: str = Field(min_length=1, max_length=2_000)


class AgentAnswer(BaseModel):
    answer: str
    tools: list[str]  # the tool calls, in the order the conversation has them
    requests: int  # model requests (responses) in the conversation


@dataclass
class AgentDeps:
    """Built once per process: where the model is, and the webhook (triage's client)."""

    base_url: str | None
    model_name: str
    api_key: str
    hook: TriageDeps
    client: Any = None  # the AsyncOpenAI client, built at the first job
    models: dict[str, Any] = field(default_factory=dict)  # each framework's, on it

    def openai_client(self) -> Any:
        if self.client is None:
            from openai import AsyncOpenAI

            # max_retries=0: a 429 reaches tasklease (Throttled: retried, no attempt used).
            self.client = AsyncOpenAI(
                base_url=self.base_url, api_key=self.api_key, max_retries=0, timeout=30.0
            )
        return self.client

    async def aclose(self) -> None:
        if self.client is not None:
            await self.client.close()
        await self.hook.aclose()


def build_deps(settings: Settings) -> AgentDeps:
    env = os.environ.get
    return AgentDeps(
        base_url=env("DEMO_AGENT_BASE_URL") or None,
        model_name=env("DEMO_AGENT_MODEL") or "fake-model",
        api_key=env("DEMO_AGENT_API_KEY") or "fake-key",
        hook=triage_deps(settings),
    )


@dataclass
class Turn:
    """One job's run of the agent: what its tools see."""

    job: JobContext[AgentDeps]


def tool_answer(name: str, argument: str) -> str:
    """A tool's answer: a function of its argument only (an uninterrupted run's equals)."""
    return f"{name} done ({zlib.crc32(argument.encode()):08x})"


async def apply(turn: Turn, key: str, name: str, call_id: str | None, argument: str) -> str:
    """Tool ``name``'s outside call, under its step's key (``<key>:tool:<name>:<call
    id>``, the integrations' own): the webhook's log counts it."""
    job = turn.job
    step = f"{key}:tool:{name}:{call_id}"
    doc = {"event": "tool", "job_id": str(job.job_id), "tool": name, "argument": argument}
    await deliver(job.deps.hook, doc, idempotency_key=job.idempotency_key(step))
    return tool_answer(name, argument)


@functools.cache
def framework(name: str) -> Any:
    """app.demos.agent_<name>: the agent of one framework, with the framework imported."""
    return importlib.import_module(f"app.demos.agent_{name}")


async def loaded(ctx: JobContext[AgentDeps], name: str) -> Any:
    """The framework's module, imported on a thread at the process's first job of it."""
    if not ctx.deps.base_url:
        raise errors.PermanentError(f"{ctx.kind} needs DEMO_AGENT_BASE_URL (a model endpoint)")
    return await asyncio.to_thread(framework, name)


@kind(KIND, timeout_seconds=120, deps=build_deps)
async def agent(ctx: JobContext[AgentDeps], q: AgentQuestion) -> AgentAnswer:
    """Answer ``q`` with the Pydantic AI agent: every model request and tool call a step."""
    pai = await loaded(ctx, KEY)
    answer: AgentAnswer = await pai.answer(ctx, q.question)
    return answer


@kind(OPENAI_KIND, timeout_seconds=120, deps=build_deps)
async def openai_agent(ctx: JobContext[AgentDeps], q: AgentQuestion) -> AgentAnswer:
    """Answer ``q`` with the OpenAI Agents SDK agent: every model response and tool call a
    step."""
    oai = await loaded(ctx, OPENAI_KEY)
    answer: AgentAnswer = await oai.answer(ctx, q.question)
    return answer
