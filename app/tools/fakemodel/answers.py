"""The fake model's answers: a pure function of the request's messages and tools."""

from __future__ import annotations

import hashlib
import json
from typing import Any

# Every answer's "created": a fixed time, so a recorded answer equals a fresh one.
CREATED = 1_767_225_600  # 2026-01-01T00:00:00Z


class BadChatRequest(ValueError):
    """The request is not a chat completion request this server can answer."""


def digest(messages: list[Any]) -> str:
    """A short digest of a conversation: the same messages, the same digest."""
    return hashlib.sha256(json.dumps(messages, sort_keys=True).encode()).hexdigest()[:16]


def _text(content: Any) -> str:
    """A message's content as text (a string, or OpenAI's list of parts)."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return " ".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return ""


def _example(name: str, schema: Any, topic: str) -> Any:
    """A value that fits ``schema`` (the parts of JSON Schema tools use)."""
    if not isinstance(schema, dict):
        return topic
    if schema.get("enum"):
        return schema["enum"][0]
    if "const" in schema:
        return schema["const"]
    if "default" in schema:
        return schema["default"]
    for union in ("anyOf", "oneOf"):
        choices = [c for c in schema.get(union) or [] if c.get("type") != "null"]
        if choices:
            return _example(name, choices[0], topic)
    kind = schema.get("type")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), "string")
    if kind == "integer":
        return max(1, int(schema.get("minimum", 1)))
    if kind == "number":
        return float(schema.get("minimum", 1))
    if kind == "boolean":
        return True
    if kind == "array":
        return [_example(name, schema.get("items", {}), topic)]
    if kind == "object" or "properties" in schema:
        return arguments(schema, topic)
    return f"{name}: {topic}" if name else topic


def arguments(schema: Any, topic: str) -> dict[str, Any]:
    """A tool call's arguments built from its parameters' JSON schema: every required
    property (and, without a ``required`` list, every property)."""
    if not isinstance(schema, dict):
        return {}
    props: dict[str, Any] = schema.get("properties") or {}
    wanted = schema.get("required", list(props))
    return {p: _example(p, props.get(p, {}), topic) for p in wanted}


def answer(request: Any) -> dict[str, Any]:
    """The chat completion for ``request`` (a parsed JSON body), without the transport."""
    if not isinstance(request, dict) or not isinstance(request.get("messages"), list):
        raise BadChatRequest("the body must be a JSON object with a 'messages' list")
    messages: list[Any] = request["messages"]
    if not messages or not all(isinstance(m, dict) and "role" in m for m in messages):
        raise BadChatRequest("'messages' must be a non-empty list of objects with a 'role'")
    model = str(request.get("model") or "fake-model")
    prompts = [_text(m.get("content")) for m in messages if m["role"] == "user"]
    topic = prompts[-1] if prompts else "the question"
    called: list[str] = []
    ids: dict[str, str] = {}
    for m in messages:
        for call in m.get("tool_calls") or []:
            fn = call.get("function") or {}
            called.append(str(fn.get("name")))
            ids[str(call.get("id"))] = str(fn.get("name"))
    results = [
        (ids.get(str(m.get("tool_call_id")), "tool"), _text(m.get("content")))
        for m in messages
        if m["role"] == "tool"
    ]
    offered = [t.get("function", {}) for t in request.get("tools") or [] if isinstance(t, dict)]
    pending = [f for f in offered if f.get("name") and f["name"] not in called]
    key = digest(messages)
    if pending:
        fn = pending[0]
        call_id = f"call_{len(called) + 1}_{fn['name']}"
        args = arguments(fn.get("parameters") or {}, topic)
        message: dict[str, Any] = {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": call_id,
                    "type": "function",
                    "function": {"name": fn["name"], "arguments": json.dumps(args)},
                }
            ],
        }
        finish = "tool_calls"
        out_text = json.dumps(args)
    else:
        quoted = "; ".join(f"{name} said {text!r}" for name, text in results)
        out_text = f"Answer to {topic!r}." + (f" From the tools: {quoted}." if quoted else "")
        message = {"role": "assistant", "content": out_text}
        finish = "stop"
    prompt_tokens = max(1, len(json.dumps(messages)) // 4)
    completion_tokens = max(1, len(out_text) // 4)
    return {
        "id": f"chatcmpl-{key}",
        "object": "chat.completion",
        "created": CREATED,
        "model": model,
        "choices": [{"index": 0, "message": message, "finish_reason": finish}],
        "usage": {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
        },
    }


def stream_chunks(completion: dict[str, Any], *, usage: bool = True) -> list[dict[str, Any]]:
    """``completion`` as the chunks of a streamed answer: the text word by word (or the
    tool call whole), then the finish reason, then (``usage``) the usage."""
    choice = completion["choices"][0]
    message = choice["message"]
    base = {k: completion[k] for k in ("id", "created", "model")}
    base["object"] = "chat.completion.chunk"

    def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        return {**base, "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}

    chunks = [chunk({"role": "assistant", "content": ""})]
    if message.get("tool_calls"):
        calls = [{"index": i, **c} for i, c in enumerate(message["tool_calls"])]
        chunks.append(chunk({"tool_calls": calls}))
    else:
        words = message["content"].split(" ")
        chunks += [chunk({"content": w if i == 0 else " " + w}) for i, w in enumerate(words)]
    chunks.append(chunk({}, choice["finish_reason"]))
    if usage:
        chunks.append({**base, "choices": [], "usage": completion["usage"]})
    return chunks
