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
import inspect
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from app import errors
from app.integrations.steps import Steps, ask_approval, check_budget
from app.kinds.context import JobContext
from app.kinds.generate import ChunkStream, Usage

try:
    import agents
    import openai
    from agents import Agent, FunctionTool, Handoff, ModelSettings, RunConfig, Runner, RunResult
    from agents.exceptions import ModelBehaviorError
    from agents.items import ModelResponse, ToolApprovalItem
    from agents.models.interface import Model, ModelProvider
    from agents.run_state import RunState
    from agents.tool_context import ToolContext
    from openai.types.responses import (
        Response,
        ResponseCompletedEvent,
        ResponseOutputItemDoneEvent,
        ResponseTextDeltaEvent,
    )
    from pydantic import TypeAdapter
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
# get_response's and stream_response's parameters (one signature), to find model_settings.
_MODEL_CALL = inspect.signature(Model.stream_response)
# 4xx answers that another try may fix: a timeout, a conflict, a throttle (429 is apart).
_TRANSIENT_4XX = (408, 409, 425)
# Runner.run's options that durable_run cannot make durable, and why.
_REFUSED = {
    "session": "a session's store is written outside the steps: pass the history as input",
}


def _model_name(model: Model) -> str:
    name = getattr(model, "model", None)
    return name if isinstance(name, str) and name else type(model).__name__


def _retry_after(exc: openai.APIStatusError) -> float | None:
    value = exc.response.headers.get("retry-after")
    try:
        return max(0.0, float(value)) if value is not None else None
    except ValueError:
        return None  # an HTTP date: the default backoff


def as_tasklease_error(exc: openai.APIStatusError, model: str) -> Exception:
    """A provider's refusal as tasklease reads it: 429 a throttle, another 4xx permanent."""
    status = exc.status_code
    if status == 429:
        return errors.Throttled(
            f"model provider throttled the request (429): {exc}",
            provider="openai",
            model=model,
            status=429,
            delay=_retry_after(exc),
        )
    if 400 <= status < 500 and status not in _TRANSIENT_4XX:
        return errors.PermanentError(f"model provider refused the request ({status}): {exc}")
    return exc


def _usage_of(response: Response) -> agents.Usage:
    """A streamed response's usage as the SDK counts it (one request, its tokens)."""
    used = response.usage
    if used is None:
        return agents.Usage(requests=1)
    return agents.Usage(
        requests=1,
        input_tokens=used.input_tokens,
        output_tokens=used.output_tokens,
        total_tokens=used.total_tokens,
        input_tokens_details=used.input_tokens_details,
        output_tokens_details=used.output_tokens_details,
    )


def _asking_usage(
    args: tuple[Any, ...], kwargs: dict[str, Any]
) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """The model call's arguments, its settings asking for the usage in the stream
    (``stream_options.include_usage``) unless they say otherwise: the SDK asks it only of
    OpenAI's own endpoint, and a stream without it reports no tokens."""
    try:
        bound = _MODEL_CALL.bind(None, *args, **kwargs)
    except TypeError:  # not the signature this SDK version has: the call as it is
        return args, kwargs
    settings = bound.arguments.get("model_settings")
    if isinstance(settings, ModelSettings) and settings.include_usage is None:
        bound.arguments["model_settings"] = dataclasses.replace(settings, include_usage=True)
    return bound.args[1:], bound.kwargs


def _request_of(args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """What a model call sends that its input tokens are estimated from: the system
    instructions and the input items."""
    try:
        bound = _MODEL_CALL.bind(None, *args, **kwargs)
    except TypeError:  # not the signature this SDK version has: whatever was passed
        return [args, kwargs]
    return [bound.arguments.get("system_instructions"), bound.arguments.get("input")]


class TaskleaseModel(Model):
    """A model whose ``get_response`` is a recorded step (``ctx.model_call``); the
    provider's answer is streamed, its text to the job's stream as it comes
    (``Steps.chunks``), and assembled from its ``response.completed`` event."""

    def __init__(self, model: Model, steps: Steps) -> None:
        self.wrapped = model
        self._steps = steps

    async def get_response(self, *args: Any, **kwargs: Any) -> ModelResponse:
        steps = self._steps
        key = steps.next_model_key()
        name = _model_name(self.wrapped)

        async def call() -> tuple[dict[str, Any], Usage]:
            chunks = await steps.chunks(key)
            try:
                if chunks is None:  # tokens not streamed: the call as the SDK made it
                    response = await self.wrapped.get_response(*args, **kwargs)
                else:
                    response = await self._streamed(chunks, args, kwargs)
            except openai.APIStatusError as exc:
                mapped = as_tasklease_error(exc, name)
                if mapped is exc:
                    raise
                raise mapped from exc
            # by_alias and exclude_unset: read back, the items equal the provider's (and
            # are sent to the model again as they were).
            recorded = _RESPONSE.dump_python(
                response, mode="json", by_alias=True, exclude_unset=True
            )
            usage = Usage(name, response.usage.input_tokens, response.usage.output_tokens)
            return {"response": recorded}, usage

        budget = steps.reservation(f"openai/{name}", _request_of(args, kwargs))
        record = await steps.ctx.model_call(key, call, **budget)
        return _RESPONSE.validate_python(record["response"])

    async def _streamed(
        self, chunks: ChunkStream, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> ModelResponse:
        """The wrapped model's ``stream_response``, drained: each text delta said to
        ``chunks`` (a refusal or a tool call's arguments are not text), the response
        that of its ``response.completed`` event (as the SDK's streamed run builds it).
        A model that cannot stream (NotImplementedError) is asked with ``get_response``."""
        stream_args, stream_kwargs = _asking_usage(args, kwargs)
        completed: Response | None = None
        done: list[Any] = []  # the output items, for a backend that leaves them off the end
        last = None
        try:
            async for event in self.wrapped.stream_response(*stream_args, **stream_kwargs):
                last = str(getattr(event, "type", type(event).__name__))
                if isinstance(event, ResponseTextDeltaEvent):
                    await chunks.said(event.delta)
                elif isinstance(event, ResponseOutputItemDoneEvent):
                    done.append(event.item)
                elif isinstance(event, ResponseCompletedEvent):
                    completed = event.response
        except NotImplementedError:
            if last is not None:
                raise
            return await self.wrapped.get_response(*args, **kwargs)
        if completed is None:
            raise ModelBehaviorError(f"the model's stream ended without a response ({last})")
        output = list(completed.output) or done
        return ModelResponse(output=output, usage=_usage_of(completed), response_id=completed.id)

    def stream_response(self, *args: Any, **kwargs: Any) -> AsyncIterator[Any]:
        raise errors.PermanentError(
            "durable_run runs Runner.run: a streamed run (Runner.run_streamed) is not durable"
        )


class TaskleaseModelProvider(ModelProvider):
    """A provider whose models are ``TaskleaseModel``s (for agents that name their model)."""

    def __init__(self, provider: ModelProvider, steps: Steps) -> None:
        self.wrapped = provider
        self._steps = steps

    def get_model(self, model_name: str | None) -> Model:
        return TaskleaseModel(self.wrapped.get_model(model_name), self._steps)


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
