"""demo.agent: a Pydantic AI agent run durably (``tasklease.pydantic_ai.TaskleaseAgent``),
the chaos gate's agent kind. Not among ``app.demos``'s kinds: the gate names this module
in TASKLEASE_KINDS itself (``app.demos,app.demos.agent``), and it needs the
``pydantic-ai`` extra, which the runtime does not.

The agent has three tools, each an outside call: it posts what it did to the webhook
(support.triage's ``deliver``) with the Idempotency-Key of its step, so the receiver's
log counts how often each tool call was applied. Their answers depend on their
arguments only, so with the deterministic fake model (``app.tools.fakemodel``) a run
interrupted anywhere ends with the answer an uninterrupted one gives.

The model: an OpenAI-compatible endpoint at DEMO_AGENT_BASE_URL (the chaos run starts
the fake model server and sets it), DEMO_AGENT_MODEL (default ``fake-model``) and
DEMO_AGENT_API_KEY (default ``fake-key``). Each request carries the job's id in the
``X-Tasklease-Job`` header, which the fake model logs. Pydantic AI is imported at the
first job a process runs (on a thread: it takes a second or two), not when the kind is
loaded: the API and the sweeper load this module and never run it.
"""

from __future__ import annotations

import asyncio
import functools
import os
import zlib
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from app import errors
from app.demos.triage import TriageDeps, deliver
from app.demos.triage import build_deps as triage_deps
from app.kinds import JobContext, kind
from app.settings.config import Settings

KIND = "demo.agent"
KEY = "pai"  # the steps' prefix: <KEY>:model:<n>, <KEY>:tool:<name>:<call id>
TOOLS = ("look_up", "file_note", "notify")  # the order the fake model calls them in
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
    model: Any = None  # the Pydantic AI model, built with the agent at the first job
    client: Any = None  # its AsyncOpenAI client

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


async def apply(ctx: Any, name: str, argument: str) -> str:
    """The tool's outside call, under its step's key: the webhook's log counts it.
    ``ctx``: Pydantic AI's RunContext[Turn] (app.demos.agent_pai's tools)."""
    job = ctx.deps.job
    step = f"{KEY}:tool:{ctx.tool_name}:{ctx.tool_call_id}"
    doc = {"event": "tool", "job_id": str(job.job_id), "tool": name, "argument": argument}
    await deliver(job.deps.hook, doc, idempotency_key=job.idempotency_key(step))
    return tool_answer(name, argument)


@functools.cache
def durable_agent() -> Any:
    """The agent (app.demos.agent_pai), imported at a process's first job: with it
    Pydantic AI and its OpenAI model, which ``model_of`` then builds without importing."""
    from app.demos import agent_pai

    return agent_pai.durable


def model_of(deps: AgentDeps) -> Any:
    """The process's model, built at its first job (after ``durable_agent``)."""
    if deps.model is None:
        from openai import AsyncOpenAI
        from pydantic_ai.models.openai import OpenAIChatModel
        from pydantic_ai.providers.openai import OpenAIProvider

        # max_retries=0: a 429 reaches tasklease (Throttled: retried, no attempt used).
        deps.client = AsyncOpenAI(
            base_url=deps.base_url, api_key=deps.api_key, max_retries=0, timeout=30.0
        )
        provider = OpenAIProvider(openai_client=deps.client)
        deps.model = OpenAIChatModel(deps.model_name, provider=provider)
    return deps.model


@kind(KIND, timeout_seconds=120, deps=build_deps)
async def agent(ctx: JobContext[AgentDeps], q: AgentQuestion) -> AgentAnswer:
    """Answer ``q`` with the agent: every model request and tool call a recorded step."""
    if not ctx.deps.base_url:
        raise errors.PermanentError(f"{KIND} needs DEMO_AGENT_BASE_URL (a model endpoint)")
    durable = await asyncio.to_thread(durable_agent)
    headers = {JOB_HEADER: str(ctx.job_id)}
    result = await durable.run(
        ctx,
        q.question,
        key=KEY,
        deps=Turn(ctx),
        model=model_of(ctx.deps),
        model_settings={"extra_headers": headers},
    )
    return answer_of(result)


def answer_of(result: Any) -> AgentAnswer:
    """The run's answer and the shape of its conversation (what an equal run repeats)."""
    messages = result.all_messages()
    calls = [
        p.tool_name for m in messages for p in m.parts if getattr(p, "part_kind", "") == "tool-call"
    ]
    responses = sum(1 for m in messages if m.kind == "response")
    return AgentAnswer(answer=str(result.output), tools=calls, requests=responses)
