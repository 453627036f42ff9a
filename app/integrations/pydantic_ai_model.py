"""The model of a ``TaskleaseAgent`` run (app/integrations/pydantic_ai.py, which names the
'pydantic-ai' extra when it is missing): each request a recorded step, the provider's
answer streamed and its text written to the job's stream as it comes."""

from __future__ import annotations

import contextlib
import datetime as dt
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from pydantic_ai import ModelMessagesTypeAdapter
from pydantic_ai.durable_exec import record_durable_unit
from pydantic_ai.exceptions import ModelHTTPError
from pydantic_ai.messages import (
    ModelMessage,
    ModelResponse,
    ModelResponseStreamEvent,
    PartDeltaEvent,
    PartStartEvent,
    TextPart,
    TextPartDelta,
)
from pydantic_ai.models import (
    CompletedStreamedResponse,
    Model,
    ModelRequestParameters,
    StreamedResponse,
)
from pydantic_ai.models.function import FunctionModel
from pydantic_ai.models.wrapper import WrapperModel
from pydantic_ai.settings import ModelSettings
from pydantic_ai.tools import RunContext

from app import errors
from app.integrations.steps import Steps
from app.kinds.generate import ChunkStream, Usage

# 4xx answers that another try may fix: a timeout, a conflict, a throttle (429 is apart).
_TRANSIENT_4XX = (408, 409, 425)


@dataclass
class AgentSteps(Steps):
    """One run's steps (the keys and counters of ``Steps``) and the run's clock."""

    clock: dt.datetime = field(default_factory=lambda: dt.datetime.now(dt.UTC))

    def saw(self, key: str) -> None:
        """Tell Pydantic AI's instrumentation whether the step ran or was replayed."""
        record_durable_unit(executed=key in self.ctx.ran)


def _usage_of(response: ModelResponse, model: Model) -> Usage:
    return Usage(
        response.model_name or model.model_name,
        response.usage.input_tokens,
        response.usage.output_tokens,
    )


def as_tasklease_error(exc: ModelHTTPError, model: Model) -> Exception:
    """A provider's refusal as tasklease reads it: 429 a throttle, another 4xx permanent."""
    status = exc.status_code
    if status == 429:
        return errors.Throttled(
            f"model provider throttled the request (429): {exc}",
            provider=model.system or "unknown",
            model=exc.model_name or model.model_name,
            status=429,
            delay=exc.retry_after,
        )
    if 400 <= status < 500 and status not in _TRANSIENT_4XX:
        return errors.PermanentError(f"model provider refused the request ({status}): {exc}")
    return exc


def _text_of(event: ModelResponseStreamEvent) -> str:
    """The text a stream's event adds (a text part's start or delta; nothing else)."""
    if isinstance(event, PartStartEvent) and isinstance(event.part, TextPart):
        return event.part.content
    if isinstance(event, PartDeltaEvent) and isinstance(event.delta, TextPartDelta):
        return event.delta.content_delta
    return ""


def _streams(model: Model) -> bool:
    """False for a model known not to stream: a FunctionModel without a stream_function
    (which asserts). Model's own request_stream raises NotImplementedError: see
    ``_drained``."""
    while isinstance(model, WrapperModel):
        model = model.wrapped
    return not (isinstance(model, FunctionModel) and model.stream_function is None)


class TaskleaseModel(WrapperModel):
    """A model whose ``request`` is a recorded step (``ctx.model_call``); the provider's
    answer is streamed, its text to the job's stream as it comes (``Steps.chunks``)."""

    def __init__(self, model: Model, steps: AgentSteps) -> None:
        super().__init__(model)
        self._steps = steps

    async def _step(
        self,
        send: Callable[[ChunkStream | None], Awaitable[ModelResponse]],
        messages: list[ModelMessage],
    ) -> ModelResponse:
        steps = self._steps
        key = steps.next_model_key()

        async def call() -> tuple[dict[str, Any], Usage]:
            try:
                response = await send(await steps.chunks(key))
            except ModelHTTPError as exc:
                mapped = as_tasklease_error(exc, self.wrapped)
                if mapped is exc:
                    raise
                raise mapped from exc
            (recorded,) = ModelMessagesTypeAdapter.dump_python([response], mode="json")
            at = steps.ctx.now().isoformat()
            return {"response": recorded, "at": at}, _usage_of(response, self.wrapped)

        name = f"{self.wrapped.system}/{self.wrapped.model_name}"
        budget = steps.reservation(
            name, ModelMessagesTypeAdapter.dump_python(messages, mode="json")
        )
        record = await steps.ctx.model_call(key, call, **budget)
        steps.saw(key)
        steps.clock = dt.datetime.fromisoformat(record["at"])
        (message,) = ModelMessagesTypeAdapter.validate_python([record["response"]])
        if not isinstance(message, ModelResponse):
            raise errors.PermanentError(f"step {key!r} recorded a {message.kind}, not a response")
        return message

    async def _drained(
        self,
        chunks: ChunkStream | None,
        messages: list[ModelMessage],
        model_settings: ModelSettings | None,
        params: ModelRequestParameters,
        run_context: RunContext[Any] | None = None,
    ) -> ModelResponse:
        """The provider's streamed answer, drained, its text said to ``chunks``. A model
        that cannot stream is asked with ``request`` (its text is not streamed)."""
        if not _streams(self.wrapped):
            return await self.wrapped.request(messages, model_settings, params)
        opened = False
        try:
            async with self.wrapped.request_stream(
                messages, model_settings, params, run_context
            ) as stream:
                opened = True
                async for event in stream:
                    text = _text_of(event)
                    if text and chunks is not None:
                        await chunks.said(text)
        except NotImplementedError:
            if opened:
                raise
            return await self.wrapped.request(messages, model_settings, params)
        return stream.get()

    async def request(
        self,
        messages: list[ModelMessage],
        model_settings: ModelSettings | None,
        model_request_parameters: ModelRequestParameters,
    ) -> ModelResponse:
        async def send(chunks: ChunkStream | None) -> ModelResponse:
            if chunks is None:  # tokens not streamed: the request as the agent made it
                return await self.wrapped.request(
                    messages, model_settings, model_request_parameters
                )
            return await self._drained(chunks, messages, model_settings, model_request_parameters)

        return await self._step(send, messages)

    @contextlib.asynccontextmanager
    async def request_stream(
        self,
        messages: list[ModelMessage],
        model_settings: ModelSettings | None,
        model_request_parameters: ModelRequestParameters,
        run_context: RunContext[Any] | None = None,
    ) -> AsyncIterator[StreamedResponse]:
        # As DBOSModel does: the step drains the provider's stream and records the whole
        # response; the run's stream replays its parts as events.
        response = await self._step(
            lambda chunks: self._drained(
                chunks, messages, model_settings, model_request_parameters, run_context
            ),
            messages,
        )
        yield CompletedStreamedResponse(
            response, model_request_parameters=model_request_parameters, replay_events=True
        )
