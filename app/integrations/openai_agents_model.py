"""The OpenAI Agents SDK integration's model: a ``get_response`` that is a recorded step
(``ctx.model_call``), its text streamed to the job's stream, and a provider's refusals as
tasklease reads them. Used by ``durable_run`` (app/integrations/openai_agents.py)."""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import AsyncIterator
from typing import Any

from app import errors
from app.integrations.steps import Steps
from app.kinds.generate import ChunkStream, Usage

try:
    import agents
    import openai
    from agents import ModelSettings
    from agents.exceptions import ModelBehaviorError
    from agents.items import ModelResponse
    from agents.models.interface import Model, ModelProvider
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

_RESPONSE: TypeAdapter[ModelResponse] = TypeAdapter(ModelResponse)
# get_response's and stream_response's parameters (one signature), to find model_settings.
_MODEL_CALL = inspect.signature(Model.stream_response)
# 4xx answers that another try may fix: a timeout, a conflict, a throttle (429 is apart).
_TRANSIENT_4XX = (408, 409, 425)


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
