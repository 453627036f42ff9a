"""ASGI middleware around the API: the request body, read once before any route sees it.

What it answers itself, before FastAPI parses anything (every route alike):

- ``413`` for a body over the limit: by Content-Length when it is sent, and by
  counting as the body streams in when it is not (chunked);
- ``415`` for a body that is compressed (any Content-Encoding but ``identity``) or
  whose Content-Type is not JSON (``application/json`` or ``application/*+json``; no
  Content-Type at all is read as JSON, and the request goes on with
  ``content-type: application/json``, so FastAPI reads it so too: a client that sends
  none, an API Gateway event that carries none);
- ``400`` for a JSON body that repeats a key in one object, naming the key and where:
  a gateway or a filter reading the first value would disagree with the API, which
  would take the last;
- ``422`` for a body nested deeper than Python's parser goes, answered as a payload
  nested over the limit is (app/services/submit.py: ``unstorable``), naming where.

A body that is not JSON at all goes on to FastAPI, whose 400 app/api/errors.py words.
A query parameter sent with an empty value (``?kind=``) is dropped here, as if it had
not been sent: every filter of every route is then ignored when empty.
"""

from __future__ import annotations

import dataclasses
import json
import re
from typing import Any

from fastapi.responses import JSONResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app.storable import MAX_PAYLOAD_DEPTH

# Where a job's payload sits in a body: {"payload": …} or {"jobs": [{"payload": …}]}.
_PAYLOAD_AT = (("payload",), ("jobs", None, "payload"))
# A JSON string or one of the punctuation marks that shape the document.
# Nesting no body needs: a payload's limit below its deepest place in a body. Deeper
# than Python's parser goes (a RecursionError), a body is refused naming where it passes this.
_MAX_DEPTH = MAX_PAYLOAD_DEPTH + max(len(p) for p in _PAYLOAD_AT)
# What a body sent without a Content-Type is read as.
_AS_JSON = (b"content-type", b"application/json")
_TOKEN = re.compile(r'"(?:[^"\\]|\\.)*"|[\[\]{},:]', re.DOTALL)


class _Refused(Exception):
    def __init__(self, status: int, detail: str, headers: dict[str, str] | None = None) -> None:
        super().__init__(detail)
        self.status = status
        self.detail = detail
        self.headers = headers


class _Repeated(ValueError):
    def __init__(self, key: str) -> None:
        super().__init__(key)
        self.key = key


class RequestBody:
    """The body's size, encoding, media type and JSON shape (see the module), and the
    query string's empty parameters."""

    def __init__(self, app: ASGIApp, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        scope = {**scope, "query_string": without_empty_params(scope.get("query_string", b""))}
        headers = _headers(scope)
        try:
            self._check_length(headers.get("content-length"))
            body = await self._read(receive)
            if body is None:
                return  # the client went away before its body arrived: nobody to answer
            if body:
                check(headers, body)
                if "content-type" not in headers:
                    scope["headers"] = [*scope.get("headers", []), _AS_JSON]
        except _Refused as refused:
            response = JSONResponse(
                {"detail": refused.detail}, status_code=refused.status, headers=refused.headers
            )
            await response(scope, receive, send)
            return
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if replayed:
                return await receive()
            replayed = True
            return {"type": "http.request", "body": body, "more_body": False}

        await self.app(scope, replay, send)

    def _check_length(self, length: str | None) -> None:
        try:
            too_big = length is not None and int(length) > self.max_bytes
        except ValueError:
            too_big = False  # the server refuses a malformed length itself
        if too_big:
            raise _Refused(413, self._too_big())

    async def _read(self, receive: Receive) -> bytes | None:
        """The whole body, counted as it streams in; None when the client went away."""
        chunks: list[bytes] = []
        seen = 0
        while True:
            message = await receive()
            if message["type"] != "http.request":
                return None
            chunk = message.get("body", b"")
            seen += len(chunk)
            if seen > self.max_bytes:
                raise _Refused(413, self._too_big())
            chunks.append(chunk)
            if not message.get("more_body", False):
                return b"".join(chunks)

    def _too_big(self) -> str:
        return f"the request body is larger than {self.max_bytes} bytes (TASKLEASE_MAX_BODY_BYTES)"


def without_empty_params(query: bytes) -> bytes:
    """The query string without its ``name=`` (and bare ``name``) parameters."""
    if not query:
        return query
    kept = [p for p in query.split(b"&") if p.partition(b"=")[2]]
    return b"&".join(kept)


def _headers(scope: Scope) -> dict[str, str]:
    """Lower-cased names; a repeated header joined with commas (RFC 9110 §5.3)."""
    out: dict[str, str] = {}
    for name, value in scope.get("headers") or []:
        key, text = name.decode("latin-1").lower(), value.decode("latin-1")
        out[key] = f"{out[key]}, {text}" if key in out else text
    return out


def check(headers: dict[str, str], body: bytes) -> None:
    """Raise _Refused for a body the API does not take (see the module)."""
    codings = [c.strip().lower() for c in headers.get("content-encoding", "").split(",")]
    unsupported = [c for c in codings if c not in ("", "identity")]
    if unsupported:
        raise _Refused(
            415,
            f"Content-Encoding {', '.join(unsupported)} is not supported: "
            "send the body uncompressed",
            {"Accept-Encoding": "identity"},
        )
    media = headers.get("content-type", "application/json").partition(";")[0].strip().lower()
    if not (media == "application/json" or re.fullmatch(r"application/[^/]+\+json", media)):
        raise _Refused(
            415, f"Content-Type {media or '(empty)'} is not supported: send application/json"
        )
    try:
        json.loads(body, object_pairs_hook=_unique)
    except _Repeated as exc:
        where = ".".join(_locate(body, repeated=True)[:-1])
        raise _Refused(
            400,
            f"the body repeats the key {json.dumps(exc.key)}"
            f"{' in ' + where if where else ''}: send each key once",
        ) from exc
    except RecursionError as exc:
        raise _Refused(422, _too_deep(_locate(body, repeated=False))) from exc
    except ValueError:
        pass  # not JSON: FastAPI answers it (app/api/errors.py words the 400)


def _unique(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise _Repeated(key)
        out[key] = value
    return out


def _too_deep(path: list[str]) -> str:
    """For a payload, the words of app/services/submit.py's answer at 101 levels."""
    for pattern in _PAYLOAD_AT:
        if len(path) > len(pattern) and all(
            p is None or p == part for p, part in zip(pattern, path, strict=False)
        ):
            job = f"jobs[{path[1]}]: " if pattern[0] == "jobs" else ""
            return (
                f"{job}payload: must not nest objects and arrays deeper than "
                f"{MAX_PAYLOAD_DEPTH} levels"
            )
    where = ".".join(["body", *path[:3]])
    return f"{where}: must not nest objects and arrays deeper than {_MAX_DEPTH} levels"


def _locate(body: bytes, *, repeated: bool) -> list[str]:
    """The path (keys and indexes) to the first repeated key (repeated), or to where the
    nesting first goes past _MAX_DEPTH. Reads the tokens without recursion: only called
    for a body already refused."""
    text = body.decode("utf-8", errors="replace")
    # One frame per open object or array: its current key or index, and the keys seen.
    frames: list[_Frame] = []
    last = '""'
    for match in _TOKEN.finditer(text):
        mark = match.group()
        if mark in ("{", "["):
            if not repeated and len(frames) >= _MAX_DEPTH:
                break
            frames.append(_Frame(at=None if mark == "{" else 0))
        elif mark in ("}", "]"):
            if frames:
                frames.pop()
        elif mark == ",":
            if frames and isinstance(frames[-1].at, int):
                frames[-1].at += 1
        elif mark == ":":
            if frames:
                key = _text(last)
                frames[-1].at = key
                if repeated and key in frames[-1].keys:
                    break
                frames[-1].keys.add(key)
        else:
            last = mark
    else:
        return []
    return [str(f.at) for f in frames]


def _text(token: str) -> str:
    """A string token's text; as sent when it does not decode (the body is bad anyway)."""
    try:
        return str(json.loads(token))
    except ValueError:
        return token


@dataclasses.dataclass
class _Frame:
    at: str | int | None
    keys: set[str] = dataclasses.field(default_factory=set)
