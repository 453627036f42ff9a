"""Streamed model answers (``ctx.generate``'s ``produce``): the fake's deterministic
text and the OpenAI-compatible streaming call, each inside a GenAI span.

A call with a ``partial`` continues it: the fake from ``len(partial)`` of its text (a
partial that is not a prefix of its text is a bug, refused); the OpenAI-compatible
provider sends the partial as a trailing assistant message, which servers that support
prefill continue (docs/explain/design.md#streams).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
from collections.abc import AsyncIterator
from typing import Any

import httpx
from httpx_sse import SSEError, aconnect_sse
from opentelemetry.trace import Span

from app import errors
from app.demos.triage import throttling
from app.kinds.generate import Usage
from app.tracing import tracer

FAKE_WRITER = "fake-writer-1"
_WORDS = [
    "the",
    "queue",
    "keeps",
    "every",
    "job",
    "until",
    "a",
    "worker",
    "leases",
    "it",
    "and",
    "records",
    "each",
    "effect",
    "once",
    "so",
    "a",
    "crash",
    "resumes",
    "where",
    "it",
    "stopped",
    "while",
    "readers",
    "watch",
    "the",
    "stream",
    "grow",
    "steadily",
]


def fake_text(prompt: str, words: int) -> str:
    """The fake's whole answer to ``prompt``: ``words`` words, a pure function of both."""
    out = []
    for i in range(words):
        digest = hashlib.sha256(f"{prompt}:{i}".encode()).digest()
        out.append(_WORDS[digest[0] % len(_WORDS)])
    return " ".join(out) + "."


def fake_pieces(text: str, start: int) -> list[str]:
    """``text[start:]`` in pieces of a word and the space before it."""
    rest, pieces, i = text[start:], [], 0
    while i < len(rest):
        j = rest.find(" ", i + 1)
        j = len(rest) if j < 0 else j
        pieces.append(rest[i:j])
        i = j
    return pieces


def model_span(system: str, model: str) -> Span:
    """A model call's span, with the GenAI semantic conventions' request attributes."""
    return tracer.start_span(
        f"chat {model}",
        attributes={
            "gen_ai.operation.name": "chat",
            "gen_ai.system": system,
            "gen_ai.provider.name": system,
            "gen_ai.request.model": model,
        },
    )


def end_span(span: Span, usage: Usage | None) -> None:
    if usage is not None:
        span.set_attribute("gen_ai.response.model", usage.model)
        if usage.input_tokens is not None:
            span.set_attribute("gen_ai.usage.input_tokens", usage.input_tokens)
        if usage.output_tokens is not None:
            span.set_attribute("gen_ai.usage.output_tokens", usage.output_tokens)
    span.end()


async def fake_generate(
    prompt: str, *, words: int, partial: str, chunk_seconds: float
) -> AsyncIterator[str | Usage]:
    """The fake's streamed answer, continued after ``partial``; tokens are words."""
    text = fake_text(prompt, words)
    if not text.startswith(partial):
        raise errors.PermanentError(
            f"fake model: the partial answer ({len(partial)} chars) is not a prefix of its text"
        )
    span, usage = model_span("fake", FAKE_WRITER), None
    try:
        for piece in fake_pieces(text, len(partial)):
            if chunk_seconds:
                await asyncio.sleep(chunk_seconds)
            yield piece
        usage = Usage(
            FAKE_WRITER,
            input_tokens=len(prompt.split()) + len(partial.split()),
            output_tokens=len(text[len(partial) :].split()),
        )
        yield usage
    finally:
        end_span(span, usage)


def chat_request(model: str, prompt: str, partial: str, prefill: str) -> dict[str, Any]:
    """The streamed request; a ``partial`` is the trailing assistant message (prefill)
    the model continues, marked as the server asks (``prefill``: TASKLEASE_OPENAI_PREFILL)."""
    messages: list[dict[str, Any]] = [{"role": "user", "content": prompt}]
    extra: dict[str, Any] = {}
    if partial:
        messages.append({"role": "assistant", "content": partial})
        if prefill == "prefix":
            messages[-1]["prefix"] = True
        elif prefill == "vllm":
            extra = {"continue_final_message": True, "add_generation_prompt": False}
    return {
        "model": model,
        "stream": True,
        "stream_options": {"include_usage": True},
        "messages": messages,
        **extra,
    }


async def openai_generate(
    *,
    base_url: str,
    headers: dict[str, str],
    timeout: float,  # noqa: ASYNC109 - the HTTP client's timeout
    model: str,
    prompt: str,
    partial: str,
    prefill: str,
    transient: type[errors.JobError],
) -> AsyncIterator[str | Usage]:
    """POST /chat/completions with stream=true; yields each delta's content, then the
    usage of the final chunk. A 429 (a 503 with Retry-After): ``Throttled``;
    408/409/5xx, a dropped stream: ``transient``."""
    span, usage = model_span("openai", model), None
    try:
        async with (
            httpx.AsyncClient(timeout=timeout) as client,
            aconnect_sse(
                client,
                "POST",
                f"{base_url}/chat/completions",
                json=chat_request(model, prompt, partial, prefill),
                headers=headers,
            ) as source,
        ):
            status = source.response.status_code
            throttling.check(status, source.response.headers, provider="openai", model=model)
            if status in (408, 409, 429) or status >= 500:
                raise transient(f"model endpoint answered {status}")
            if status >= 400:
                raise errors.PermanentError(f"model endpoint refused the request: {status}")
            answered = model
            async for event in source.aiter_sse():
                if event.data.strip() == "[DONE]":
                    break
                chunk = json.loads(event.data)
                answered = chunk.get("model") or answered
                for choice in chunk.get("choices") or []:
                    piece = (choice.get("delta") or {}).get("content")
                    if piece:
                        yield piece
                if chunk.get("usage"):
                    u = chunk["usage"]
                    usage = Usage(answered, u.get("prompt_tokens"), u.get("completion_tokens"))
        yield usage or Usage(answered)
    except (httpx.HTTPError, SSEError) as exc:
        raise transient(f"model stream failed: {exc}") from exc
    except (ValueError, TypeError, AttributeError) as exc:
        raise transient(f"model stream sent a chunk that is not the JSON expected: {exc}") from exc
    finally:
        end_span(span, usage)
