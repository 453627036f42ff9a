"""Run a ``pydantic_ai.Agent`` inside a kind, every model request and tool call a step.

```python
from pydantic_ai import Agent
from tasklease import JobContext, kind
from tasklease.pydantic_ai import TaskleaseAgent

agent = Agent(model, tools=[search, fetch_page], deps_type=Deps)
durable = TaskleaseAgent(agent)

@kind("research.ask", timeout_seconds=300)
async def ask(ctx: JobContext[Deps], q: Question) -> str:
    result = await durable.run(ctx, q.text, deps=ctx.deps)
    return result.output
```

Shaped as Pydantic AI's own durable backends (``TemporalAgent``, ``DBOSAgent``): the
agent's model is wrapped so that its ``request`` is a step, and its toolset so that
``call_tool`` is one. Here a step is a tasklease effect, so after a crash or a
redelivery the next attempt runs the agent loop again from the top and every step
recorded before returns its record instead of calling the model or the tool again:

- model request ``n`` (0, 1, ...) is ``ctx.model_call("<key>:model:<n>")``: its
  ``ModelResponse`` is recorded with Pydantic AI's ``ModelMessagesTypeAdapter`` and its
  token usage lands in the job's usage; a provider's 429 raises ``Throttled`` (no
  attempt used), another 4xx ``PermanentError``. The request is streamed from the
  provider and its text written to the job's stream as it comes, as ``chunk`` events
  under the step's key (``stream_tokens=False``: not); after a crash mid-answer, the
  request sent again streams only past the chunks written before;
- tool call ``<name>`` with id ``<id>`` is ``ctx.effect("<key>:tool:<name>:<id>")``: its
  return (or ``ModelRetry``, ``ToolFailed``, ...) is recorded as Pydantic AI's
  ``CallToolResult``;
- ``<key>:start`` records when the run began: with the run's id derived from the job's
  and ``key``, and the clock following the recorded steps, a replayed run's messages
  (timestamps and ids included) equal the first attempt's.

The agent code between steps (instructions, validators, output functions) runs again
on each attempt: keep it deterministic, as Temporal asks of workflow code.
"""

from __future__ import annotations

import contextlib
import datetime as dt
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from app import errors
from app.integrations.steps import check_budget, step_key
from app.kinds.context import JobContext

try:
    from pydantic import TypeAdapter
    from pydantic_ai import (
        Agent,
        DeferredToolRequests,
        DeferredToolResults,
        ModelMessagesTypeAdapter,
    )
    from pydantic_ai.capabilities import AbstractCapability
    from pydantic_ai.durable_exec import (
        CallToolResult,
        conversation_id_from_run_id,
        replay_scope,
    )
    from pydantic_ai.durable_exec._toolset import (
        unwrap_tool_call_result,
        wrap_tool_call_result,
    )
    from pydantic_ai.messages import ModelMessage
    from pydantic_ai.models import Model
    from pydantic_ai.run import AgentRunResult
    from pydantic_ai.tools import RunContext
    from pydantic_ai.toolsets import AbstractToolset, ToolsetTool, WrapperToolset

    from app.integrations.approvals import NotifyApproval, approvals, with_deferred
    from app.integrations.pydantic_ai_model import AgentSteps, TaskleaseModel
except ImportError as exc:  # pragma: no cover - exercised in a process without the extra
    raise ImportError(
        "tasklease.pydantic_ai needs Pydantic AI: install tasklease's 'pydantic-ai' extra "
        "(pip install 'tasklease[pydantic-ai]', or uv sync --extra pydantic-ai)"
    ) from exc

__all__ = ["TaskleaseAgent", "messages_from_json", "messages_json"]

D = TypeVar("D")
O = TypeVar("O")  # noqa: E741 - the agent's output type, as Pydantic AI names it

DEFAULT_KEY = "pai"
MAX_APPROVAL_ROUNDS = 20
_TOOL_RESULT: TypeAdapter[Any] = TypeAdapter(CallToolResult)


@dataclass
class TaskleaseToolset(WrapperToolset[Any]):
    """A toolset whose ``call_tool`` is a recorded step (``ctx.effect``)."""

    steps: AgentSteps | None = None

    async def call_tool(
        self, name: str, tool_args: dict[str, Any], ctx: RunContext[Any], tool: ToolsetTool[Any]
    ) -> Any:
        steps = self.steps
        assert steps is not None
        key = steps.tool_key(name, ctx.tool_call_id)

        async def call() -> Any:
            result = await wrap_tool_call_result(self.wrapped.call_tool(name, tool_args, ctx, tool))
            return _TOOL_RESULT.dump_python(result, mode="json")

        recorded = await steps.ctx.effect(key, call)
        steps.saw(key)
        return unwrap_tool_call_result(_TOOL_RESULT.validate_python(recorded))


@dataclass
class _DurableSteps(AbstractCapability[Any]):
    """The capability a run gets: the wrappers, a run id and a clock that replay."""

    steps: AgentSteps | None = None
    run_id: str = ""

    @classmethod
    def get_serialization_name(cls) -> str | None:
        return None

    def get_wrapper_model(self, model: Model) -> Model | None:
        assert self.steps is not None
        return None if isinstance(model, TaskleaseModel) else TaskleaseModel(model, self.steps)

    def get_wrapper_toolset(self, toolset: AbstractToolset[Any]) -> AbstractToolset[Any] | None:
        return TaskleaseToolset(toolset, steps=self.steps)

    def get_default_run_id(self) -> str | None:
        return self.run_id

    def get_default_conversation_id(self, run_id: str) -> str | None:
        return conversation_id_from_run_id(run_id)


@contextlib.contextmanager
def _clock(steps: AgentSteps) -> Iterator[None]:
    """Pydantic AI stamps messages with ``now_utc()``: read the steps' clock instead, so a
    replay stamps what the first attempt did. (A private hook of Pydantic AI's, installed
    by its Temporal backend too; without it only the timestamps would differ.)"""
    try:
        from pydantic_ai._utils import override_now_utc
    except ImportError:  # pragma: no cover - an older or newer Pydantic AI
        yield
        return
    with override_now_utc(lambda: steps.clock):
        yield


class TaskleaseAgent(Generic[D, O]):
    """``agent`` run inside a kind, each model request and tool call a recorded step."""

    def __init__(self, agent: Agent[D, O]) -> None:
        if not isinstance(agent, Agent):
            raise TypeError(f"TaskleaseAgent wraps a pydantic_ai.Agent, not {type(agent).__name__}")
        self.agent = agent

    async def run(
        self,
        ctx: JobContext[Any],
        user_prompt: str | None = None,
        *,
        key: str = DEFAULT_KEY,
        deps: D = None,  # type: ignore[assignment]
        message_history: Sequence[ModelMessage] | None = None,
        approval_timeout: float | None = None,
        notify_approval: NotifyApproval | None = None,
        stream_tokens: bool = True,
        budget: str | None = None,
        **options: Any,
    ) -> AgentRunResult[O]:
        """``agent.run(user_prompt, deps=..., ...)`` with its steps recorded under ``key``
        (give each run of an agent in one kind its own). The other ``options`` are
        ``Agent.run``'s (``output_type``, ``model_settings``, ``usage_limits``, ...).

        ``approval_timeout`` (seconds): a tool that needs approval waits for callback
        ``<key>:approve:<tool_call_id>`` (``notify_approval(token, call)`` hands out its
        token), holding no worker; the run continues with the answer under ``<key>.1``,
        ``<key>.2``, ... Without it, the run ends with ``DeferredToolRequests`` as
        Pydantic AI's does, if ``output_type`` allows it.

        ``stream_tokens``: each model request's text goes to the job's stream as it comes
        (chunks under the request's step key, as ``ctx.generate``'s); False: the requests
        are not streamed (``request`` as the agent makes it).

        ``budget``: the shared model budget ("provider/model" in TASKLEASE_MODEL_BUDGETS)
        each model request reserves under, with an estimate of its input tokens, settled
        by its usage; by default the model's own ("openai/gpt-4o-mini"). Over a budget the
        job waits holding nothing; the tenant's daily tokens apply as to ``ctx.generate``."""
        # A misuse is the kind's code's mistake: PermanentError, not retried in vain.
        if not isinstance(ctx, JobContext):
            raise errors.PermanentError(
                f"TaskleaseAgent.run needs the kind's JobContext, not {type(ctx).__name__}"
            )
        if not key or ":" in key or len(key) > 40:
            raise errors.PermanentError(
                f"TaskleaseAgent.run: key must be 1 to 40 characters without ':', not {key!r}"
            )
        check_budget(budget, "TaskleaseAgent.run")
        for taken in ("run_id", "conversation_id", "capabilities", "deferred_tool_results"):
            if taken in options:
                raise errors.PermanentError(
                    f"TaskleaseAgent.run: {taken}= is TaskleaseAgent's own (it makes replays equal)"
                )
        if approval_timeout is None:
            return await self._run_once(
                ctx,
                key,
                user_prompt,
                deps,
                message_history,
                options,
                stream_tokens=stream_tokens,
                budget=budget,
            )
        options["output_type"] = with_deferred(options.get("output_type", self.agent.output_type))
        deferred: DeferredToolResults | None = None
        for segment in range(MAX_APPROVAL_ROUNDS):
            # Each continuation records under a key of its own: its steps count from 0.
            run_key = key if segment == 0 else f"{key}.{segment}"
            result = await self._run_once(
                ctx,
                run_key,
                user_prompt,
                deps,
                message_history,
                options,
                deferred,
                stream_tokens=stream_tokens,
                budget=budget,
            )
            if not isinstance(result.output, DeferredToolRequests):
                return result
            deferred = await approvals(
                ctx, key, result.output, timeout=approval_timeout, notify=notify_approval
            )
            user_prompt, message_history = None, result.all_messages()
        raise errors.PermanentError(
            f"{key}: more than {MAX_APPROVAL_ROUNDS} rounds of approvals in one run"
        )

    async def _run_once(
        self,
        ctx: JobContext[Any],
        key: str,
        user_prompt: str | None,
        deps: D,
        message_history: Sequence[ModelMessage] | None,
        options: dict[str, Any],
        deferred: DeferredToolResults | None = None,
        *,
        stream_tokens: bool,
        budget: str | None,
    ) -> AgentRunResult[Any]:
        steps = AgentSteps(ctx, key, stream_tokens=stream_tokens, budget=budget)
        started: str = await ctx.effect(step_key(key, "start"), _now_iso(ctx))
        steps.clock = dt.datetime.fromisoformat(started)
        capability = _DurableSteps(steps=steps, run_id=f"{ctx.job_id}:{key}")
        with replay_scope(), _clock(steps):
            result: AgentRunResult[Any] = await self.agent.run(
                user_prompt,
                deps=deps,
                message_history=message_history,
                deferred_tool_results=deferred,
                capabilities=[capability],
                **options,
            )
        return result


def _now_iso(ctx: JobContext[Any]) -> Any:
    async def now() -> str:
        return ctx.now().isoformat()

    return now


def messages_json(result: AgentRunResult[Any]) -> list[Any]:
    """The run's messages as JSON (``ModelMessagesTypeAdapter``): a kind's result, or the
    ``message_history`` of a later run once read back with ``messages_from_json``."""
    return list(ModelMessagesTypeAdapter.dump_python(result.all_messages(), mode="json"))


def messages_from_json(data: Any) -> list[ModelMessage]:
    """Messages that ``messages_json`` wrote, as Pydantic AI's objects."""
    return ModelMessagesTypeAdapter.validate_python(data)
