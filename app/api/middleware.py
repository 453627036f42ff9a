"""ASGI middleware around the API: the request body's size limit."""

from __future__ import annotations

from fastapi import HTTPException
from fastapi.responses import JSONResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send


class BodyLimit:
    """413 for a body over the limit, before anything reads it: by Content-Length when it
    is sent, and by counting as the body streams in when it is not (chunked)."""

    def __init__(self, app: ASGIApp, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        length = dict(scope.get("headers") or []).get(b"content-length")
        if length is not None:
            try:
                too_big = int(length) > self.max_bytes
            except ValueError:
                too_big = False  # the server refuses a malformed length itself
            if too_big:
                response = JSONResponse({"detail": self._detail()}, status_code=413)
                await response(scope, receive, send)
                return
        seen = 0

        async def counted() -> Message:
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > self.max_bytes:
                    # FastAPI passes an HTTPException raised while it reads the body
                    # through to the answer (any other exception becomes a 400).
                    raise HTTPException(status_code=413, detail=self._detail())
            return message

        await self.app(scope, counted, send)

    def _detail(self) -> str:
        return f"the request body is larger than {self.max_bytes} bytes (TASKLEASE_MAX_BODY_BYTES)"
