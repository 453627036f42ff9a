"""The client's requests and the reading of their answers, written once for the sync and
the async client (which only send them): each API call is a ``Call`` naming the request
and how to parse its answer; ``Waiter`` and ``Resume`` hold the state of ``wait`` and of
a resumable ``stream`` between the requests they make."""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import time
import urllib.parse
import uuid
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Generic, TypeVar, get_args

import httpx
from httpx_sse import ServerSentEvent
from pydantic import BaseModel

from app.client import errors, models

T = TypeVar("T")
M = TypeVar("M", bound=BaseModel)
JobId = uuid.UUID | str
# The API waits at most this long in one long poll (app/services/streams.py).
MAX_POLL_SECONDS = 25.0
# Reconnecting a dropped stream: this many tries in a row, backing off up to RETRY_CAP.
STREAM_RETRIES = 8
RETRY_CAP = 5.0
# The events a job's stream hands out (its SSE frames' names; "end" ends it).
STREAM_EVENT_TYPES = frozenset(get_args(models.StreamEvent.model_fields["type"].annotation))
# "No result given" (None is a result: JSON null).
UNSET: Any = object()


@dataclasses.dataclass(frozen=True)
class Call(Generic[T]):
    method: str
    path: str
    parse: Callable[[Any], T]
    json: Any = None
    params: Mapping[str, str] | None = None
    headers: Mapping[str, str] | None = None
    timeout: float | None = None  # None: the client's


def request_args(call: Call[Any], timeout: float) -> dict[str, Any]:
    """``httpx.Client.request``'s arguments for ``call`` (``timeout``: the client's)."""
    return {
        "method": call.method,
        "url": call.path,
        "json": call.json,
        "params": call.params,
        "headers": call.headers,
        "timeout": call.timeout if call.timeout is not None else timeout,
    }


def _model(cls: type[M]) -> Callable[[Any], M]:
    return cls.model_validate


def job_path(job_id: JobId, tail: str = "") -> str:
    return f"/v1/jobs/{urllib.parse.quote(str(job_id), safe='')}{tail}"


def _job_fields(
    max_attempts: int | None,
    timeout_seconds: int | None,
    run_at: dt.datetime | None,
    delay_seconds: float | None,
    priority: str | None = None,
) -> dict[str, Any]:
    fields = {
        "max_attempts": max_attempts,
        "timeout_seconds": timeout_seconds,
        "run_at": run_at.isoformat() if run_at is not None else None,
        "delay_seconds": delay_seconds,
        "priority": str(priority) if priority is not None else None,
    }
    return {k: v for k, v in fields.items() if v is not None}


def submit(
    kind: str,
    payload: Mapping[str, Any],
    *,
    idempotency_key: str | None,
    max_attempts: int | None,
    timeout_seconds: int | None,
    run_at: dt.datetime | None,
    delay_seconds: float | None,
    priority: models.Priority | str | None = None,
    deadline: dt.datetime | None = None,
    deadline_seconds: float | None = None,
) -> Call[models.Job]:
    body = {
        "kind": kind,
        "payload": dict(payload),
        **_job_fields(max_attempts, timeout_seconds, run_at, delay_seconds, priority),
    }
    if deadline is not None:
        body["deadline"] = deadline.isoformat()
    if deadline_seconds is not None:
        body["deadline_seconds"] = deadline_seconds
    return Call("POST", "/v1/jobs", _model(models.Job), json=body, headers=_keyed(idempotency_key))


def submit_many(
    items: Iterable[models.JobRequest | Mapping[str, Any]],
) -> Call[list[models.Job]]:
    jobs = [
        (i if isinstance(i, models.JobRequest) else models.JobRequest.model_validate(i))
        for i in items
    ]
    body = {"jobs": [j.model_dump(mode="json", exclude_none=True) for j in jobs]}
    return Call(
        "POST", "/v1/jobs/batch", lambda doc: models.JobBatch.model_validate(doc).jobs, json=body
    )


def kinds() -> Call[list[models.KindInfo]]:
    def parse(doc: Any) -> list[models.KindInfo]:
        return [models.KindInfo.model_validate(k) for k in doc["kinds"]]

    return Call("GET", "/v1/kinds", parse)


def workers() -> Call[list[models.WorkerInfo]]:
    def parse(doc: Any) -> list[models.WorkerInfo]:
        return [models.WorkerInfo.model_validate(w) for w in doc["workers"]]

    return Call("GET", "/v1/workers", parse)


def get(job_id: JobId) -> Call[models.JobDetail]:
    return Call("GET", job_path(job_id), _model(models.JobDetail))


def cancel(job_id: JobId) -> Call[models.Job]:
    return Call("POST", job_path(job_id, "/cancel"), _model(models.Job))


def _keyed(idempotency_key: str | None) -> dict[str, str] | None:
    return {"Idempotency-Key": idempotency_key} if idempotency_key is not None else None


def rerun(
    job_id: JobId, payload: dict[str, Any] | None, idempotency_key: str | None = None
) -> Call[models.Job]:
    body = {} if payload is None else {"payload": payload}
    path = job_path(job_id, "/rerun")
    return Call("POST", path, _model(models.Job), json=body, headers=_keyed(idempotency_key))


def fork(
    job_id: JobId,
    step: str | None,
    payload: dict[str, Any] | None,
    idempotency_key: str | None = None,
) -> Call[models.Fork]:
    body: dict[str, Any] = {} if step is None else {"step": step}
    if payload is not None:
        body["payload"] = payload
    path = job_path(job_id, "/fork")
    return Call("POST", path, _model(models.Fork), json=body, headers=_keyed(idempotency_key))


def redrive(job_id: JobId, force: bool) -> Call[models.Job]:
    params = {"force": "true"} if force else None
    return Call("POST", job_path(job_id, "/redrive"), _model(models.Job), params=params)


def send_message(
    job_id: JobId, topic: str, body: Any, idempotency_key: str | None
) -> Call[models.MessageSent]:
    headers = _keyed(idempotency_key)
    return Call(
        "POST",
        job_path(job_id, "/messages"),
        _model(models.MessageSent),
        json={"topic": topic, "body": body},
        headers=headers,
    )


def messages(job_id: JobId) -> Call[list[models.Message]]:
    def parse(doc: Any) -> list[models.Message]:
        return [models.Message.model_validate(m) for m in doc]

    return Call("GET", job_path(job_id, "/messages"), parse)


def state(job_id: JobId) -> Call[dict[str, models.StateValue]]:
    def parse(doc: Any) -> dict[str, models.StateValue]:
        page = models.StatePage.model_validate(doc)
        return {item.key: item for item in page.items}

    return Call("GET", job_path(job_id, "/state"), parse)


def state_key(
    job_id: JobId, key: str, *, after_version: int | None = None, wait: float = 0.0
) -> Call[models.StateValue]:
    """One key; with ``after_version``, a long poll of up to ``wait`` seconds."""
    params = None if after_version is None else {"after_version": str(after_version)}
    if params is not None:
        params["wait"] = f"{min(wait, MAX_POLL_SECONDS):.3f}"
    return Call(
        "GET",
        job_path(job_id, f"/state/{urllib.parse.quote(key, safe='')}"),
        _model(models.StateValue),
        params=params,
        timeout=None if params is None else min(wait, MAX_POLL_SECONDS) + 30.0,
    )


class StateWaiter:
    """``wait_state``'s state: long polls of the key until its version is past
    ``after_version``, within ``timeout`` seconds. A poll that answers without (an unset
    key: 404) is asked again while the job can still change it; a finished job cannot:
    then the key as it is (compare the version), or NotFound while it is unset."""

    def __init__(self, job_id: JobId, key: str, after_version: int, timeout: float) -> None:
        self.job_id, self.key, self.after_version = str(job_id), key, after_version
        self.timeout = timeout
        self.deadline = time.monotonic() + timeout
        self.last: models.StateValue | None = None

    def poll(self) -> Call[models.StateValue]:
        """The next long poll, or Timeout when the deadline has passed."""
        left = self.deadline - time.monotonic()
        if left <= 0:
            where = "unset" if self.last is None else f"at version {self.last.version}"
            raise errors.Timeout(self.job_id, f"with key {self.key!r} {where}", self.timeout)
        return state_key(self.job_id, self.key, after_version=self.after_version, wait=left)

    def past(self, value: models.StateValue | None) -> bool:
        """Take a poll's answer (None: unset) in; whether it is what ``wait_state`` waits for."""
        self.last = value
        return value is not None and value.version > self.after_version

    def answer(self, job: models.Job) -> models.StateValue | None:
        """With the job read again after an answer that was not past: what to return now
        that it is finished (NotFound for an unset key), or None to poll again."""
        if not job.finished:
            return None
        if self.last is None:
            raise errors.NotFound(
                404, f"job {self.job_id} finished without publishing key {self.key!r}"
            )
        return self.last


def _callback_path(token: str, tail: str = "") -> str:
    return f"/v1/callbacks/{urllib.parse.quote(token, safe='')}{tail}"


def complete(
    token: str, result: Any = UNSET, error: str | None = None
) -> Call[models.CallbackAnswered]:
    """Exactly one of ``result`` (any JSON, None included) or ``error``."""
    if (result is UNSET) == (error is None):
        raise ValueError("give result (any JSON) or error (a message), exactly one")
    body = {"error": error} if error is not None else {"result": result}
    return Call("POST", _callback_path(token), _model(models.CallbackAnswered), json=body)


def heartbeat(token: str) -> Call[models.CallbackHeartbeat]:
    return Call("POST", _callback_path(token, "/heartbeat"), _model(models.CallbackHeartbeat))


# --- answers ----------------------------------------------------------------------


def error_of(response: httpx.Response) -> errors.APIError:
    """The exception for an error answer (its body read): the problem's ``detail``."""
    try:
        body: Any = response.json()
    except ValueError:
        body = response.text
    detail = body.get("detail") if isinstance(body, dict) else None
    message = detail if isinstance(detail, str) else (response.text or response.reason_phrase)
    status = response.status_code
    if status == 429:
        return errors.RateLimited(status, message, body, _retry_after(response))
    cls = errors.BY_STATUS.get(status)
    if cls is None:
        cls = errors.Unavailable if status >= 500 else errors.APIError
    return cls(status, message, body)


def _retry_after(response: httpx.Response) -> float | None:
    try:
        return float(response.headers["Retry-After"])
    except (KeyError, ValueError):
        return None


def result(call: Call[T], response: httpx.Response) -> T:
    if response.is_error:
        raise error_of(response)
    return call.parse(response.json())


def lost(exc: httpx.TransportError, base_url: httpx.URL) -> errors.ConnectionLost:
    return errors.ConnectionLost(f"cannot reach the tasklease API at {base_url}: {exc!r}")


# --- wait ---------------------------------------------------------------------------


class Waiter:
    """``wait``'s state: the job's last known state, where its stream was read up to and
    the deadline. The long poll of the job's stream wakes it when something happens."""

    def __init__(
        self,
        job_id: JobId,
        timeout: float,
        on_event: Callable[[models.StreamEvent], object] | None,
    ) -> None:
        self.job_id = str(job_id)
        self.timeout = timeout
        self.deadline = time.monotonic() + timeout
        self.on_event = on_event
        self.after = "0"
        self.state = "unknown"
        self.read_all = False  # the job's stream was read to its end

    def finished(self, job: models.Job) -> bool:
        """Whether ``wait`` is over: the job is finished and, for an ``on_event``, every
        event of its stream was handed to it (a job finished already still shows them)."""
        self.state = job.state.value
        return job.finished and (self.on_event is None or self.read_all)

    def poll(self, http_timeout: float) -> Call[models.StreamPage]:
        """The next long poll, or Timeout when the deadline has passed."""
        left = self.deadline - time.monotonic()
        if left <= 0:
            raise errors.Timeout(self.job_id, self.state, self.timeout)
        wait = min(left, MAX_POLL_SECONDS)
        return Call(
            "GET",
            job_path(self.job_id, "/stream"),
            _model(models.StreamPage),
            params={"after": self.after, "wait": f"{wait:.3f}"},
            timeout=wait + http_timeout,
        )

    def saw(self, page: models.StreamPage) -> bool:
        """Take a page in; whether the job's stream is done (the job is finished)."""
        for event in page.events:
            if event.type == "transition" and isinstance(event.data, dict):
                self.state = str(event.data.get("to_state", self.state))
            if self.on_event is not None:
                self.on_event(event)
        self.after = page.next
        self.read_all = page.done
        return page.done


# --- a resumable stream -------------------------------------------------------------


def position(event_id: str) -> tuple[int, int]:
    """An event id ("<tx>-<id>", "0") as the order the stream follows."""
    tx, _, rest = event_id.partition("-")
    return (int(tx), int(rest or 0))


# Answers a reconnection tries again after, as after a dropped connection.
GATEWAY_ERRORS = (502, 503, 504)


class Resume:
    """``stream``'s (and ``stream_all``'s) state across connections: the last event id
    seen, sent back as ``Last-Event-ID`` on a reconnection, and whatever a server repeats
    is skipped. A job's stream ends with the job; every job's (``/v1/stream``) never does."""

    def __init__(
        self, job_id: JobId | None, after: str | None, *, tenant: str | None = None
    ) -> None:
        self.path = job_path(job_id, "/stream") if job_id is not None else "/v1/stream"
        self.params = {"tenant": tenant} if tenant else {}
        self.last = after
        self.ended = False
        self.failures = 0

    def headers(self) -> dict[str, str]:
        return {"Last-Event-ID": self.last} if self.last else {}

    def answered(self, response: httpx.Response) -> bool:
        """Whether the stream's answer is Server-Sent Events; an error answer (its body
        read) raises. Not SSE: the API answers long polls only (behind API Gateway and
        Lambda, which cannot stream), and the stream goes on by ``poll``."""
        if response.status_code in GATEWAY_ERRORS:
            # A proxy or a deploy between the client and an API process: try again.
            raise httpx.TransportError(f"{self.path} answered {response.status_code}")
        if response.is_error:
            raise error_of(response)
        return str(response.headers.get("content-type", "")).startswith("text/event-stream")

    def _new(self, event_id: str) -> bool:
        return self.last is None or position(event_id) > position(self.last)

    def accept(self, sse: ServerSentEvent) -> models.StreamEvent | None:
        """The event to hand out, or None (a repeat, a frame of no event, the end)."""
        self.failures = 0
        if sse.event == "end":
            self.ended = True
            return None
        if sse.event == "open" and sse.id and self._new(sse.id):
            # /v1/stream's first frame: where it begins, so that a reconnection before
            # any job moved resumes from there, not from a later "now".
            self.last = sse.id
            return None
        if sse.event not in STREAM_EVENT_TYPES:
            return None
        if sse.id and not self._new(sse.id):
            return None
        event = models.StreamEvent.model_validate(json.loads(sse.data))
        self.last = event.id
        return event

    def poll(self, http_timeout: float) -> Call[models.StreamPage]:
        """The long poll that follows the last event (where the API cannot stream)."""
        return Call(
            "GET",
            self.path,
            _model(models.StreamPage),
            params={**self.params, "after": self.last or "0", "wait": f"{MAX_POLL_SECONDS:g}"},
            timeout=MAX_POLL_SECONDS + http_timeout,
        )

    def take(self, page: models.StreamPage) -> list[models.StreamEvent]:
        """A long poll's new events; the stream ends when the page says the job is done."""
        events = [e for e in page.events if self._new(e.id)]
        if events:
            self.last = events[-1].id
        self.ended = page.done
        return events

    def dropped(self, exc: Exception | None) -> float:
        """The pause before reconnecting, or ConnectionLost after too many tries."""
        self.failures += 1
        if self.failures > STREAM_RETRIES:
            raise errors.ConnectionLost(
                f"the stream {self.path} dropped {STREAM_RETRIES} times in a row: {exc!r}"
            ) from exc
        return min(RETRY_CAP, 0.1 * 2.0 ** (self.failures - 1))


# A stream's read timeout: the API pings every 15 s, so this long in silence is a dead link.
STREAM_READ_TIMEOUT = 45.0
