"""Run an OpenAI Agents SDK ``agents.Agent`` inside a kind, every model response and
function tool call a step.

```python
from agents import Agent, function_tool
from tasklease import JobContext, kind
from tasklease.openai_agents import durable_run

agent = Agent(name="researcher", instructions="...", tools=[search], model=model)

@kind("research.ask", timeout_seconds=300)
async def ask(ctx: JobContext[Deps], q: Question) -> str:
    result = await durable_run(ctx, agent, q.text, context=ctx.deps)
    return str(result.final_output)
```

Shaped as Temporal's (``temporalio.contrib.openai_agents``) and DBOS's
(``dbos-openai-agents``) integrations: the model is wrapped so that ``get_response`` is a
step, and each function tool so that its invocation is one. Here a step is a tasklease
effect, so after a crash or a redelivery the next attempt runs ``Runner.run`` again from
the top and every step recorded before returns its record:

- model response ``n`` (0, 1, ...) is ``ctx.model_call("<key>:model:<n>")``: the SDK's
  ``ModelResponse`` (its output items are ``openai.types.responses`` models) recorded as
  JSON and read back equal; its token usage lands in the job's usage; a provider's 429
  raises ``Throttled`` (no attempt used), another 4xx ``PermanentError``. The response
  is streamed (``stream_response``) and its text written to the job's stream as it
  comes, as ``chunk`` events under the step's key (``stream_tokens=False``: not); after a
  crash mid-answer, the response asked for again streams only past the chunks written;
- function tool ``<name>`` called with id ``<id>`` is
  ``ctx.effect("<key>:tool:<name>:<id>")``: its output recorded (JSON, or its ``str``).

Each run works on a copy of the agent and of every agent it can hand off to, with the
models and function tools wrapped; the agents passed in are not changed. The agent code
between steps (instructions, guardrails, hooks, handoff callbacks) runs again on each
attempt: keep it deterministic, as Temporal asks of workflow code.
"""

from __future__ import annotations

import copy
import dataclasses
import json
from collections.abc import Awaitable, Callable
from typing import Any

from app import errors
from app.integrations.steps import Steps, ask_approval, check_budget
from app.kinds.context import JobContext

try:
    from agents import Agent, FunctionTool, Handoff, RunConfig, Runner, RunResult
    from agents.items import ModelResponse, ToolApprovalItem
    from agents.models.interface import Model
    from agents.run_state import RunState
    from agents.tool_context import ToolContext
    from pydantic import TypeAdapter

    from app.integrations.openai_agents_model import TaskleaseModel, TaskleaseModelProvider
except ImportError as exc:  # pragma: no cover - exercised in a process without the extra
    raise ImportError(
        "tasklease.openai_agents needs the OpenAI Agents SDK: install tasklease's "
        "'openai-agents' extra (pip install 'tasklease[openai-agents]', "
        "or uv sync --extra openai-agents)"
    ) from exc

__all__ = ["NotifyApproval", "durable_run", "items_json"]

DEFAULT_KEY = "oai"
MAX_APPROVAL_ROUNDS = 20
# notify(token, item): hand the callback's token to whoever approves the tool call.
NotifyApproval = Callable[[str, ToolApprovalItem], Awaitable[Any]]
_RESPONSE: TypeAdapter[ModelResponse] = TypeAdapter(ModelResponse)
# Runner.run's options that durable_run cannot make durable, and why.
_REFUSED = {
    "session": "a session's store is written outside the steps: pass the history as input",
}


def _recordable(output: Any) -> Any:
    """A tool's output as the record holds it: JSON as it is; anything else as the text
    the SDK would send the model (``str``), so a replay sends the same."""
    try:
        return json.loads(json.dumps(output))
    except (TypeError, ValueError):
        return str(output)


def _step_tool(tool: FunctionTool, steps: Steps) -> FunctionTool:
    invoke = tool.on_invoke_tool

    async def on_invoke_tool(tool_ctx: ToolContext[Any], arguments: str) -> Any:
        key = steps.tool_key(tool.name, tool_ctx.tool_call_id)

        async def call() -> dict[str, Any]:
            return {"output": _recordable(await invoke(tool_ctx, arguments))}

        recorded = await steps.ctx.effect(key, call)
        return recorded["output"]

    wrapped = copy.copy(tool)  # FunctionTool's own copy keeps its failure handling
    wrapped.on_invoke_tool = on_invoke_tool
    return wrapped


class _Durable:
    """One run's copies of the agents it can reach, their models and tools wrapped."""

    def __init__(self, steps: Steps) -> None:
        self.steps = steps
        self.agents: dict[int, Agent[Any]] = {}

    def agent(self, agent: Agent[Any]) -> Agent[Any]:
        found = self.agents.get(id(agent))
        if found is not None:
            return found
        clone = agent.clone()
        self.agents[id(agent)] = clone  # before the handoffs: they may lead back here
        if isinstance(agent.model, Model):
            clone.model = self.model(agent.model)
        clone.tools = [
            _step_tool(t, self.steps) if isinstance(t, FunctionTool) else t for t in agent.tools
        ]
        clone.handoffs = [
            self.agent(h) if isinstance(h, Agent) else self.handoff(h) for h in agent.handoffs
        ]
        return clone

    def model(self, model: Model) -> Model:
        return model if isinstance(model, TaskleaseModel) else TaskleaseModel(model, self.steps)

    def handoff(self, handoff: Handoff[Any, Any]) -> Handoff[Any, Any]:
        invoke = handoff.on_invoke_handoff

        async def on_invoke_handoff(ctx: Any, arguments: str) -> Agent[Any]:
            return self.agent(await invoke(ctx, arguments))

        return dataclasses.replace(handoff, on_invoke_handoff=on_invoke_handoff)

    def run_config(self, run_config: RunConfig | None) -> RunConfig:
        # No run_config: tracing off, so nothing is sent to OpenAI's trace endpoint.
        config = run_config or RunConfig(tracing_disabled=True)
        model = config.model
        return dataclasses.replace(
            config,
            model=self.model(model) if isinstance(model, Model) else model,
            model_provider=TaskleaseModelProvider(config.model_provider, self.steps),
        )


def _check(ctx: Any, agent: Any, key: str, options: dict[str, Any]) -> None:
    """A misuse is the kind's code's mistake: PermanentError, not retried in vain."""
    if not isinstance(ctx, JobContext):
        raise errors.PermanentError(
            f"durable_run needs the kind's JobContext, not {type(ctx).__name__}"
        )
    if not isinstance(agent, Agent):
        raise errors.PermanentError(f"durable_run runs an agents.Agent, not {type(agent).__name__}")
    if not key or ":" in key or len(key) > 40:
        raise errors.PermanentError(
            f"durable_run: key must be 1 to 40 characters without ':', not {key!r}"
        )
    for refused, why in _REFUSED.items():
        if refused in options:
            raise errors.PermanentError(f"durable_run: {refused}= is refused ({why})")


async def durable_run(
    ctx: JobContext[Any],
    agent: Agent[Any],
    input: str | list[Any],
    *,
    key: str = DEFAULT_KEY,
    run_config: RunConfig | None = None,
    approval_timeout: float | None = None,
    notify_approval: NotifyApproval | None = None,
    stream_tokens: bool = True,
    budget: str | None = None,
    **options: Any,
) -> RunResult:
    """``Runner.run(agent, input, run_config=..., **options)`` with its steps recorded under
    ``key`` (give each run in one kind its own). ``options`` are Runner.run's
    (``context``, ``max_turns``, ``hooks``, ...); ``session`` is refused.

    ``approval_timeout`` (seconds): a tool with ``needs_approval`` waits for callback
    ``<key>:approve:<call_id>`` (``notify_approval(token, item)`` hands out its token),
    holding no worker; the run continues with the answer. Without it, the run ends with
    ``result.interruptions`` as the SDK's does.

    ``stream_tokens``: each model response is streamed from the provider
    (``stream_response``) and its text goes to the job's stream as it comes (chunks under
    the response's step key, as ``ctx.generate``'s); False: ``get_response``, as the SDK
    calls it, and nothing streamed.

    ``budget``: the shared model budget ("provider/model" in TASKLEASE_MODEL_BUDGETS) each
    model response reserves under, with an estimate of its input tokens, settled by its
    usage; by default "openai/<the model's name>". Over a budget the job waits holding
    nothing; the tenant's daily tokens apply as to ``ctx.generate``."""
    _check(ctx, agent, key, options)
    check_budget(budget, "durable_run")
    durable = _Durable(Steps(ctx, key, stream_tokens=stream_tokens, budget=budget))
    config = durable.run_config(run_config)
    start: str | list[Any] | RunState[Any] = input
    for _ in range(MAX_APPROVAL_ROUNDS):
        result = await Runner.run(durable.agent(agent), start, run_config=config, **options)
        if approval_timeout is None or not result.interruptions:
            return result
        start = await _approvals(ctx, key, result, approval_timeout, notify_approval)
    raise errors.PermanentError(
        f"{key}: more than {MAX_APPROVAL_ROUNDS} rounds of approvals in one run"
    )


async def _approvals(
    ctx: JobContext[Any],
    key: str,
    result: RunResult,
    timeout: float,  # noqa: ASYNC109 - each approval's deadline, as wait_for_callback's
    notify: NotifyApproval | None,
) -> RunState[Any]:
    """Wait for an answer to each interruption, in order (callback
    ``<key>:approve:<call_id>``); a call still unanswered suspends the job."""
    state = result.to_state()
    for item in result.interruptions:
        approved, message = await ask_approval(
            ctx, key, str(item.call_id), item, timeout=timeout, notify=notify
        )
        if approved:
            state.approve(item)
        else:
            state.reject(item, rejection_message=message)
    return state


def items_json(result: RunResult) -> list[Any]:
    """The run's conversation as JSON input items (``result.to_input_list()``): a kind's
    result, or the ``input`` of a later run that continues it."""
    items: list[Any] = json.loads(json.dumps(result.to_input_list()))
    return items
