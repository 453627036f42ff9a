"""The fake model's HTTP server (FastAPI): the answers of ``answers``, the request log and
the throttle switch."""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import threading
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import uvicorn
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, StreamingResponse

from app.tools.fakemodel.answers import BadChatRequest, answer, digest, stream_chunks

RETRY_AFTER_SECONDS = 1
# A client may name the job a request is for; the log keeps it (the chaos gate's checks).
JOB_HEADER = "x-tasklease-job"


def create_app(log_path: Path | None = None, *, chunk_ms: float = 0) -> FastAPI:
    """The server; ``log_path``: a JSON line per request answered, appended; ``chunk_ms``:
    a pause before each chunk of a streamed answer (a test that kills mid-answer)."""
    app = FastAPI(title="tasklease fake model")
    answered: list[dict[str, Any]] = []
    throttle = {"next": 0}

    def error(status: int, message: str, **headers: str) -> JSONResponse:
        body = {"error": {"message": message, "type": "invalid_request_error", "code": status}}
        return JSONResponse(body, status_code=status, headers=headers)

    def logged(entry: dict[str, Any]) -> None:
        entry["n"] = len(answered) + 1
        answered.append(entry)
        if log_path is not None:
            with log_path.open("a") as fh:
                fh.write(json.dumps(entry) + "\n")

    @app.post("/v1/chat/completions", response_model=None)
    async def completions(request: Request) -> JSONResponse | StreamingResponse:
        try:
            body = await request.json()
            completion = answer(body)
        except (ValueError, BadChatRequest) as exc:
            return error(400, f"bad chat completion request: {exc}")
        key = digest(body["messages"])
        # Whose request, and which of its conversation's turns: a harness counts repeats.
        seen = {
            "digest": key,
            "at": dt.datetime.now(dt.UTC).isoformat(),
            "job": request.headers.get(JOB_HEADER),
            "turn": sum(1 for m in body["messages"] if m["role"] == "assistant"),
        }
        if throttle["next"] > 0:
            throttle["next"] -= 1
            logged({**seen, "answer": "429"})
            return error(429, "rate limited (fake)", **{"retry-after": str(RETRY_AFTER_SECONDS)})
        message = completion["choices"][0]["message"]
        calls = message.get("tool_calls") or []
        said = f"tool:{calls[0]['function']['name']}" if calls else "text"
        logged({**seen, "answer": said, "stream": bool(body.get("stream"))})
        if not body.get("stream"):
            return JSONResponse(completion)

        # As OpenAI's: the usage comes in the stream only if stream_options ask for it.
        options = body.get("stream_options")
        usage = isinstance(options, dict) and options.get("include_usage") is True

        async def events() -> AsyncIterator[str]:
            for chunk in stream_chunks(completion, usage=usage):
                await asyncio.sleep(chunk_ms / 1000)
                yield f"data: {json.dumps(chunk)}\n\n"
            yield "data: [DONE]\n\n"

        return StreamingResponse(events(), media_type="text/event-stream")

    @app.get("/v1/requests")
    async def requests() -> dict[str, Any]:
        digests = [a["digest"] for a in answered if a["answer"] != "429"]
        repeated = sorted({d for d in digests if digests.count(d) > 1})
        return {"count": len(answered), "requests": answered, "repeated": repeated}

    @app.post("/v1/throttle", response_model=None)
    async def set_throttle(request: Request) -> JSONResponse:
        try:
            body = await request.json()
        except ValueError:
            body = None
        n = body.get("next") if isinstance(body, dict) else None
        if not isinstance(n, int) or isinstance(n, bool) or n < 0:
            return error(400, 'throttle: send {"next": N}, N a whole number of requests >= 0')
        throttle["next"] = n
        return JSONResponse({"next": n})

    return app


@dataclass
class RunningServer:
    """A fake model serving on a thread of this process: ``url`` ends in /v1."""

    url: str
    server: uvicorn.Server
    thread: threading.Thread

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(10)


def serve_in_thread(
    *, host: str = "127.0.0.1", port: int = 0, log_path: Path | None = None
) -> RunningServer:
    """Start the fake model on ``port`` (0: a free one) in a daemon thread; returns once it
    answers."""
    config = uvicorn.Config(
        create_app(log_path), host=host, port=port, log_level="warning", lifespan="off"
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, name="fake-model", daemon=True)
    thread.start()
    for _ in range(500):
        if server.started:
            break
        if not thread.is_alive():
            raise RuntimeError(f"the fake model server did not start on {host}:{port}")
        threading.Event().wait(0.01)
    else:
        server.should_exit = True
        raise RuntimeError(f"the fake model server did not start on {host}:{port} in 5 s")
    bound = server.servers[0].sockets[0].getsockname()[1]
    return RunningServer(f"http://{host}:{bound}/v1", server, thread)
