"""A counting HTTP proxy in front of an SQS endpoint: ``python -m bench.proxy UPSTREAM PORT``.

Every request is forwarded as it came (keep-alive, one upstream connection per
client connection) and counted by action: the ``X-Amz-Target`` header (JSON
protocol, what botocore speaks) or the ``Action=`` form field (query protocol).
A ReceiveMessage whose answer holds no message is counted as an empty receive;
batch calls also count their entries. ``GET /__counts`` returns the counts as JSON,
``POST /__reset`` zeroes them. It runs in its own process so that its work does not
share a GIL with the benchmark's clients.
"""

from __future__ import annotations

import http.client
import json
import sys
import threading
import urllib.parse
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

HOP = {"connection", "keep-alive", "transfer-encoding", "te", "trailer", "upgrade"}


class Counts:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.calls: Counter[str] = Counter()
        self.entries: Counter[str] = Counter()

    def add(self, action: str, entries: int) -> None:
        with self.lock:
            self.calls[action] += 1
            self.entries[action] += entries

    def snapshot(self) -> dict[str, dict[str, int]]:
        with self.lock:
            return {"calls": dict(self.calls), "entries": dict(self.entries)}

    def reset(self) -> None:
        with self.lock:
            self.calls.clear()
            self.entries.clear()


def action_of(headers: http.client.HTTPMessage, body: bytes) -> tuple[str, dict[str, object]]:
    target = headers.get("X-Amz-Target")
    if target:
        try:
            doc = json.loads(body or b"{}")
        except ValueError:
            doc = {}
        return target.rsplit(".", 1)[-1], doc if isinstance(doc, dict) else {}
    form = urllib.parse.parse_qs(body.decode("utf-8", "replace"))
    action = (form.get("Action") or ["?"])[0]
    entries = sum(1 for k in form if k.endswith(".Id") and "Entry" in k)
    return action, {"_form_entries": entries}


def entries_of(action: str, doc: dict[str, object], resp: bytes) -> int:
    if "_form_entries" in doc:
        n = int(doc["_form_entries"])  # type: ignore[call-overload]
        if action == "ReceiveMessage":
            return resp.count(b"<Message>")
        return n or 1
    if action == "ReceiveMessage":
        try:
            return len(json.loads(resp or b"{}").get("Messages") or [])
        except ValueError:
            return resp.count(b'"MessageId"')
    entries = doc.get("Entries")
    return len(entries) if isinstance(entries, list) else 1


def make_handler(upstream: str, counts: Counts) -> type[BaseHTTPRequestHandler]:
    up = urllib.parse.urlsplit(upstream)

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        # The answer's headers and body leave in one segment, not behind Nagle's algorithm:
        # with it, the body waited for the client's delayed ACK of the headers, 40 ms on
        # Linux, on a random share of answers (the proxy's own delay, measured as ours).
        disable_nagle_algorithm = True
        # Buffered, so headers and body are one write (handle_one_request flushes it).
        wbufsize = 64 * 1024
        conn: http.client.HTTPConnection | None = None

        def log_message(self, format: str, *args: object) -> None:
            pass

        def _upstream(self) -> http.client.HTTPConnection:
            if self.conn is None:
                self.conn = http.client.HTTPConnection(up.hostname, up.port or 80, timeout=60)
            return self.conn

        def _reply(self, status: int, body: bytes, headers: list[tuple[str, str]]) -> None:
            self.send_response(status)
            for k, v in headers:
                if k.lower() not in HOP and k.lower() != "content-length":
                    self.send_header(k, v)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def _forward(self) -> None:
            if self.path == "/__counts":
                body = json.dumps(counts.snapshot()).encode()
                self._reply(200, body, [("Content-Type", "application/json")])
                return
            if self.path == "/__reset":
                counts.reset()
                self._reply(200, b"{}", [("Content-Type", "application/json")])
                return
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length else b""
            headers = {k: v for k, v in self.headers.items() if k.lower() not in HOP}
            for attempt in (1, 2):
                try:
                    conn = self._upstream()
                    conn.request(self.command, self.path, body=body, headers=headers)
                    resp = conn.getresponse()
                    data = resp.read()
                    break
                except (OSError, http.client.HTTPException):
                    if self.conn is not None:
                        self.conn.close()
                    self.conn = None
                    if attempt == 2:
                        self._reply(502, b"proxy: upstream failed", [])
                        return
            if self.command == "POST":
                action, doc = action_of(self.headers, body)
                n = entries_of(action, doc, data)
                counts.add(action, n)
                if action == "ReceiveMessage" and n == 0:
                    counts.add("ReceiveMessage(empty)", 0)
            self._reply(resp.status, data, resp.getheaders())

        do_POST = _forward
        do_GET = _forward
        do_PUT = _forward
        do_DELETE = _forward
        do_HEAD = _forward

    return Handler


def main() -> None:
    upstream, port = sys.argv[1], int(sys.argv[2])
    server = ThreadingHTTPServer(("127.0.0.1", port), make_handler(upstream, Counts()))
    server.daemon_threads = True
    server.request_queue_size = 256
    server.serve_forever()


if __name__ == "__main__":
    main()
