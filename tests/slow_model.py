"""A fake OpenAI-compatible server for the cancellation tests: a real HTTP server on a
thread that streams a chat completion slowly (a piece every ``piece_seconds``) and
records when the client closed its connection, watching the socket between pieces."""

from __future__ import annotations

import json
import select
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class SlowOpenAI(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, *, piece_seconds: float = 0.05, pieces: int = 600) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.piece_seconds = piece_seconds
        self.pieces = pieces
        self.requests = 0
        self.sent = 0  # pieces written, over every request
        self.streaming = threading.Event()  # a request is being answered
        self.closed = threading.Event()  # a client closed its connection mid-answer
        self.closed_at: float | None = None  # time.monotonic() when it was seen

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/v1"


def _gone(conn: socket.socket, seconds: float) -> bool:
    """Wait up to ``seconds``; True as soon as the peer closed (or reset) the connection."""
    readable, _, _ = select.select([conn], [], [], seconds)
    if not readable:
        return False
    try:
        return conn.recv(1, socket.MSG_PEEK) == b""
    except OSError:
        return True


class _Handler(BaseHTTPRequestHandler):
    server: SlowOpenAI

    def log_message(self, *args: Any) -> None:
        pass

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers["Content-Length"]))
        srv = self.server
        srv.requests += 1
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.end_headers()
        srv.streaming.set()
        try:
            for i in range(srv.pieces):
                chunk = {
                    "model": "slow-1",
                    "choices": [{"index": 0, "delta": {"content": f"w{i} "}}],
                }
                self.wfile.write(f"data: {json.dumps(chunk)}\n\n".encode())
                self.wfile.flush()
                srv.sent += 1
                if _gone(self.connection, srv.piece_seconds):
                    raise ConnectionResetError("client closed")
            usage = {"prompt_tokens": 3, "completion_tokens": srv.pieces}
            final = {"model": "slow-1", "choices": [], "usage": usage}
            self.wfile.write(f"data: {json.dumps(final)}\n\ndata: [DONE]\n\n".encode())
        except OSError:
            srv.closed_at = time.monotonic()
            srv.closed.set()
