"""The fake OpenAI-compatible model server (app/tools/fakemodel): its answers are a
function of the conversation, it reports usage, streams as SSE, logs what it answered,
and refuses what is not a chat completion request, saying why."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from app.tools.fakemodel import answer, serve_in_thread
from app.tools.fakemodel.answers import BadChatRequest, arguments
from app.tools.fakemodel.server import RunningServer

pytestmark = pytest.mark.unit

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "lookup",
            "parameters": {
                "type": "object",
                "properties": {
                    "term": {"type": "string"},
                    "limit": {"type": "integer", "minimum": 3},
                    "mode": {"enum": ["fast", "deep"]},
                    "tags": {"type": "array", "items": {"type": "string"}},
                    "exact": {"anyOf": [{"type": "boolean"}, {"type": "null"}]},
                },
                "required": ["term", "limit", "mode", "tags", "exact"],
            },
        },
    },
    {"type": "function", "function": {"name": "ping", "parameters": {"type": "object"}}},
]
ASK = [{"role": "user", "content": "what is a lease?"}]


def test_arguments_fit_the_tool_s_schema() -> None:
    args = arguments(TOOLS[0]["function"]["parameters"], "leases")
    assert args == {
        "term": "term: leases",
        "limit": 3,
        "mode": "fast",
        "tags": ["tags: leases"],
        "exact": True,
    }


def test_it_calls_each_offered_tool_once_then_answers_quoting_their_results() -> None:
    first = answer({"model": "m", "messages": ASK, "tools": TOOLS})
    call = first["choices"][0]["message"]["tool_calls"][0]
    assert call["id"] == "call_1_lookup"
    assert first["choices"][0]["finish_reason"] == "tool_calls"
    convo = [
        *ASK,
        first["choices"][0]["message"],
        {"role": "tool", "tool_call_id": "call_1_lookup", "content": "a fence"},
    ]
    second = answer({"model": "m", "messages": convo, "tools": TOOLS})
    assert second["choices"][0]["message"]["tool_calls"][0]["function"]["name"] == "ping"
    convo += [
        second["choices"][0]["message"],
        {"role": "tool", "tool_call_id": "call_2_ping", "content": "pong"},
    ]
    final = answer({"model": "m", "messages": convo, "tools": TOOLS})
    text = final["choices"][0]["message"]["content"]
    assert text == (
        "Answer to 'what is a lease?'. From the tools: lookup said 'a fence'; ping said 'pong'."
    )
    assert final["usage"]["prompt_tokens"] > second["usage"]["prompt_tokens"] > 0
    assert answer({"model": "m", "messages": convo, "tools": TOOLS}) == final  # deterministic


@pytest.mark.parametrize(
    ("body", "why"),
    [
        ([], "a JSON object with a 'messages' list"),
        ({"messages": []}, "non-empty list of objects with a 'role'"),
        ({"messages": [{"content": "x"}]}, "non-empty list of objects with a 'role'"),
    ],
)
def test_a_request_that_is_not_a_chat_completion_is_refused_saying_why(body: Any, why: str) -> None:
    with pytest.raises(BadChatRequest, match=why):
        answer(body)


@pytest.fixture
def server(tmp_path: Path) -> Iterator[RunningServer]:
    running = serve_in_thread(log_path=tmp_path / "requests.jsonl")
    yield running
    running.stop()


def streamed_chunks(url: str, body: dict[str, Any]) -> list[dict[str, Any]]:
    """A streamed answer's chunks (the SSE data lines before [DONE])."""
    with httpx.stream("POST", url, json=body, timeout=10) as streamed:
        assert streamed.headers["content-type"].startswith("text/event-stream")
        lines = [ln.removeprefix("data: ") for ln in streamed.iter_lines() if ln]
    assert lines[-1] == "[DONE]"
    return [json.loads(ln) for ln in lines[:-1]]


def test_over_http_it_answers_streams_logs_and_counts_repeats(
    server: RunningServer, tmp_path: Path
) -> None:
    url = f"{server.url}/chat/completions"
    plain = httpx.post(url, json={"model": "m", "messages": ASK}, timeout=10)
    assert plain.status_code == 200
    assert plain.json()["choices"][0]["message"]["content"] == "Answer to 'what is a lease?'."
    usage = {"include_usage": True}
    chunks = streamed_chunks(url, {"model": "m", "messages": ASK, "stream": True})
    text = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c["choices"])
    assert text == "Answer to 'what is a lease?'."
    assert not any("usage" in c for c in chunks)  # as OpenAI's: only if asked
    asked = {"model": "m", "messages": ASK, "stream": True, "stream_options": usage}
    assert streamed_chunks(url, asked)[-1]["usage"]["completion_tokens"] > 0
    bad = httpx.post(url, content=b"not json", timeout=10)
    assert bad.status_code == 400
    assert "bad chat completion request" in bad.json()["error"]["message"]
    seen = httpx.get(f"{server.url}/requests", timeout=10).json()
    assert seen["count"] == 3
    assert seen["repeated"] == [seen["requests"][0]["digest"]]  # the same conversation again
    logged = (tmp_path / "requests.jsonl").read_text().splitlines()
    assert [json.loads(ln)["stream"] for ln in logged] == [False, True, True]


def test_a_throttle_answers_429_with_retry_after_then_answers_again(
    server: RunningServer,
) -> None:
    refused = httpx.post(f"{server.url}/throttle", json={"next": -1}, timeout=10)
    assert refused.status_code == 400
    assert 'send {"next": N}' in refused.json()["error"]["message"]
    httpx.post(f"{server.url}/throttle", json={"next": 1}, timeout=10).raise_for_status()
    url = f"{server.url}/chat/completions"
    throttled = httpx.post(url, json={"messages": ASK}, timeout=10)
    assert throttled.status_code == 429
    assert throttled.headers["retry-after"] == "1"
    assert httpx.post(url, json={"messages": ASK}, timeout=10).status_code == 200


def test_the_log_says_whose_request_each_was_its_turn_and_when(server: RunningServer) -> None:
    url = f"{server.url}/chat/completions"
    first = httpx.post(url, json={"messages": ASK, "tools": TOOLS}, timeout=10).json()
    convo = [*ASK, first["choices"][0]["message"], {"role": "tool", "content": "x"}]
    headers = {"X-Tasklease-Job": "job-1"}
    httpx.post(url, json={"messages": convo}, headers=headers, timeout=10).raise_for_status()
    seen = httpx.get(f"{server.url}/requests", timeout=10).json()["requests"]
    assert [(r["job"], r["turn"]) for r in seen] == [(None, 0), ("job-1", 1)]
    assert seen[0]["at"] <= seen[1]["at"]
