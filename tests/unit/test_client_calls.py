"""The client's request building and answer reading, with no server: the API's error
bodies as exceptions, a callback answer's one-of rule, and a resumed stream that skips
what a server repeats and asks with the last event id (app/client/calls.py)."""

from __future__ import annotations

import json
import uuid
from typing import Any

import httpx
import pytest
from httpx_sse import ServerSentEvent

from app import client
from app.client import calls, following

pytestmark = pytest.mark.unit


def answer(status: int, body: Any, **headers: str) -> httpx.Response:
    return httpx.Response(status, json=body, headers=headers)


@pytest.mark.parametrize(
    ("status", "cls"),
    [
        (400, client.BadRequest),
        (401, client.Unauthorized),
        (403, client.Forbidden),
        (404, client.NotFound),
        (409, client.Conflict),
        (413, client.PayloadTooLarge),
        (422, client.Unprocessable),
        (503, client.Unavailable),
        (418, client.APIError),
    ],
)
def test_an_error_answer_is_its_exception_with_the_message(
    status: int, cls: type[client.APIError]
) -> None:
    exc = calls.error_of(answer(status, {"detail": "what was wrong"}))
    assert type(exc) is cls and isinstance(exc, client.TaskleaseError)
    assert (exc.status, exc.message, exc.body) == (
        status,
        "what was wrong",
        {"detail": "what was wrong"},
    )
    assert str(exc) == f"{status}: what was wrong"


def test_a_429_says_when_to_retry() -> None:
    exc = calls.error_of(answer(429, {"detail": "over the rate"}, **{"Retry-After": "3"}))
    assert isinstance(exc, client.RateLimited) and exc.retry_after == 3.0


def test_an_error_that_is_not_json_keeps_its_text() -> None:
    exc = calls.error_of(httpx.Response(502, text="bad gateway"))
    assert isinstance(exc, client.Unavailable) and exc.message == "bad gateway"


def test_a_callback_answer_is_a_result_or_an_error() -> None:
    assert calls.complete("t/1", result=None).json == {"result": None}
    assert calls.complete("t", error="no").json == {"error": "no"}
    assert calls.complete("t/1", result=1).path == "/v1/callbacks/t%2F1"
    for bad in ({}, {"result": 1, "error": "no"}):
        with pytest.raises(ValueError, match="exactly one"):
            calls.complete("t", **bad)


def test_submit_sends_only_what_was_given() -> None:
    call = calls.submit(
        "k",
        {"a": 1},
        idempotency_key="i",
        max_attempts=None,
        timeout_seconds=5,
        run_at=None,
        delay_seconds=None,
    )
    assert call.json == {"kind": "k", "payload": {"a": 1}, "timeout_seconds": 5}
    assert call.headers == {"Idempotency-Key": "i"}
    with pytest.raises(ValueError, match="bogus"):
        calls.submit_many([{"kind": "k", "payload": {}, "bogus": 1}])


def frame(event_id: str, event: str = "progress") -> ServerSentEvent:
    data = {
        "id": event_id,
        "type": event,
        "job_id": str(uuid.UUID(int=1)),
        "tenant": "t",
        "kind": "k",
        "at": "2026-01-01T00:00:00Z",
        "attempt": 1,
        "data": {},
    }
    return ServerSentEvent(event=event, data=json.dumps(data), id=event_id)


def test_a_resumed_stream_skips_repeats_and_asks_after_the_last_event() -> None:
    resume = following.Resume(uuid.UUID(int=1), None)
    assert resume.headers() == {}
    assert [e.id for e in map(resume.accept, [frame("5-1"), frame("5-2")]) if e] == ["5-1", "5-2"]
    assert resume.headers() == {"Last-Event-ID": "5-2"}
    # A server that repeats from an earlier point: nothing handed out twice.
    again = [resume.accept(f) for f in (frame("5-1"), frame("5-2"), frame("6-1"))]
    assert [e.id for e in again if e] == ["6-1"]
    assert resume.accept(ServerSentEvent(event="end", data="{}")) is None and resume.ended


def test_a_stream_that_keeps_dropping_gives_up_naming_it() -> None:
    resume = following.Resume("j", "0")
    for _ in range(following.STREAM_RETRIES):
        assert 0 < resume.dropped(None) <= following.RETRY_CAP
    with pytest.raises(client.ConnectionLost, match="/v1/jobs/j/stream"):
        resume.dropped(httpx.ReadError("gone"))


@pytest.mark.parametrize("status", [502, 503, 504])
def test_a_gateway_error_on_reconnecting_is_tried_again_as_a_drop(status: int) -> None:
    """A rolling deploy or a proxy answers 502-504 for a moment: the stream reconnects."""
    resume = following.Resume("j", "5-2")
    with pytest.raises(httpx.TransportError):
        resume.answered(httpx.Response(status, request=httpx.Request("GET", "http://t/x")))
    with pytest.raises(client.NotFound):
        resume.answered(
            httpx.Response(404, json={"detail": "no job"}, request=httpx.Request("GET", "http://t"))
        )


def page(ids: list[str], done: bool) -> dict[str, Any]:
    events = [json.loads(frame(i).data) for i in ids]
    return {"events": events, "next": ids[-1] if ids else "0", "done": done}


def test_a_stream_from_an_api_that_cannot_stream_follows_by_long_poll() -> None:
    """Behind API Gateway and Lambda the stream route answers long polls (JSON): the
    client goes on by ``?after=``, from the last event it handed out, until done."""
    asked: list[str | None] = []
    pages = {
        None: page([], False),
        "0": page(["1-1", "1-2"], False),
        "1-2": page(["1-2", "1-3"], True),
    }

    def api(request: httpx.Request) -> httpx.Response:
        after = request.url.params.get("after")
        asked.append(after)
        return httpx.Response(200, json=pages[after])

    with client.Client("http://api", "k", transport=httpx.MockTransport(api)) as tl:
        assert [e.id for e in tl.stream("j")] == ["1-1", "1-2", "1-3"]
    assert asked == [None, "0", "1-2"]


@pytest.mark.asyncio
async def test_the_async_stream_raises_the_apis_error() -> None:
    def api(request: httpx.Request) -> httpx.Response:
        return httpx.Response(404, json={"detail": "job j not found"})

    async with client.AsyncClient("http://api", "k", transport=httpx.MockTransport(api)) as tl:
        with pytest.raises(client.NotFound, match="job j not found"):
            [e async for e in tl.stream("j")]
