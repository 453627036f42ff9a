"""The OpenAI-compatible provider's streamed call against a real local HTTP server (a
tiny fake OpenAI server in this test) that answers Server-Sent Events and records what
it received: the request (stream, stream_options, the partial as a trailing assistant
message), the pieces and the usage of the final chunk, and errors as transient."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from app import errors
from app.demos.triage import TriageDeps, providers
from app.demos.triage import settings as triage_settings
from app.demos.writer import write
from app.kinds.generate import Usage
from app.kinds.memory_store import EffectStore
from app.kinds.testing import run_kind
from tests.helpers import serving

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("clean_env")]

PIECES = ["Leases ", "expire, ", "so work ", "moves on."]


class FakeOpenAI(ThreadingHTTPServer):
    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), Handler)
        self.received: list[dict[str, Any]] = []
        self.headers_seen: list[dict[str, str]] = []
        self.status = 200
        self.reply_headers: dict[str, str] = {}  # sent with an error status

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/v1"


class Handler(BaseHTTPRequestHandler):
    server: FakeOpenAI

    def log_message(self, *args: Any) -> None:
        pass

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.server.received.append(body)
        self.server.headers_seen.append(dict(self.headers))
        if self.server.status != 200:
            self.send_response(self.server.status)
            self.send_header("Content-Type", "application/json")
            for name, value in self.server.reply_headers.items():
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(b'{"error": {"message": "busy"}}')
            return
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.end_headers()
        for piece in PIECES:
            chunk = {"model": "served-1", "choices": [{"index": 0, "delta": {"content": piece}}]}
            self.wfile.write(f"data: {json.dumps(chunk)}\n\n".encode())
            self.wfile.flush()
        final = {
            "model": "served-1",
            "choices": [],
            "usage": {"prompt_tokens": 11, "completion_tokens": 7, "total_tokens": 18},
        }
        self.wfile.write(f"data: {json.dumps(final)}\n\ndata: [DONE]\n\n".encode())


@pytest.fixture
def server() -> Iterator[FakeOpenAI]:
    srv = FakeOpenAI()
    with serving(srv):
        yield srv


def provider(server: FakeOpenAI, prefill: str = "assistant") -> providers.OpenAICompatibleProvider:
    settings = triage_settings.load(
        openai_prefill=prefill,
        model_provider="openai",
        openai_base_url=server.url,
        openai_api_key="sk-test",
        openai_model="asked-1",
    )
    return providers.OpenAICompatibleProvider(settings)


async def collect(model: providers.OpenAICompatibleProvider, partial: str) -> list[Any]:
    return [
        p async for p in model.generate("Explain leases", partial=partial, idempotency_key="j:a")
    ]


def test_it_streams_the_pieces_then_the_usage_of_the_final_chunk(server: FakeOpenAI) -> None:
    got = asyncio.run(collect(provider(server), ""))
    assert got == [*PIECES, Usage("served-1", 11, 7)]
    (sent,) = server.received
    assert sent["stream"] is True and sent["stream_options"] == {"include_usage": True}
    assert sent["model"] == "asked-1"
    assert sent["messages"] == [{"role": "user", "content": "Explain leases"}]
    assert server.headers_seen[0]["Idempotency-Key"] == "j:a"
    assert server.headers_seen[0]["Authorization"] == "Bearer sk-test"


def test_a_partial_answer_is_sent_as_a_trailing_assistant_message(server: FakeOpenAI) -> None:
    asyncio.run(collect(provider(server), "Leases expire,"))
    asyncio.run(collect(provider(server, "vllm"), "Leases expire,"))
    asyncio.run(collect(provider(server, "prefix"), "Leases expire,"))
    plain, vllm, prefix = server.received
    assert plain["messages"][-1] == {"role": "assistant", "content": "Leases expire,"}
    assert "continue_final_message" not in plain
    assert vllm["messages"] == plain["messages"]
    assert (vllm["continue_final_message"], vllm["add_generation_prompt"]) == (True, False)
    assert prefix["messages"][-1] == {**plain["messages"][-1], "prefix": True}


@pytest.mark.parametrize(
    ("status", "error"),
    [(429, "throttled"), (503, "transient"), (400, "permanent")],
)
def test_an_error_status_is_transient_or_permanent_as_for_triage(
    server: FakeOpenAI, status: int, error: str
) -> None:
    server.status = status
    raises = {
        "throttled": errors.Throttled,
        "transient": providers.TransientModelError,
        "permanent": errors.PermanentError,
    }[error]
    with pytest.raises(raises, match=str(status)):
        asyncio.run(collect(provider(server), ""))


def test_demo_write_records_the_served_text_and_usage(server: FakeOpenAI) -> None:
    import httpx

    store = EffectStore()
    deps = TriageDeps(provider(server), httpx.AsyncClient(), None)
    run = asyncio.run(run_kind(write, {"prompt": "Explain leases"}, deps=deps, store=store))
    assert run.result.text == "".join(PIECES)
    assert [store.chunks["answer"][i] for i in range(len(PIECES))] == PIECES
    assert store.usage["answer"] == Usage("served-1", 11, 7)
