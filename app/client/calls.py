"""The client's requests and the reading of their answers, written once for the sync and
the async client (which only send them): each API call is a ``Call`` naming the request
and how to parse its answer (app/client/following.py holds what ``wait`` and a resumable
``stream`` keep between the requests they make)."""

from __future__ import annotations

import dataclasses
import datetime as dt
import urllib.parse
import uuid
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Generic, TypeVar

import httpx
from pydantic import BaseModel

from app.client import errors, models

T = TypeVar("T")
M = TypeVar("M", bound=BaseModel)
JobId = uuid.UUID | str
# The API waits at most this long in one long poll (app/services/streams.py).
MAX_POLL_SECONDS = 25.0
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
    # Instead of ``parse``, for an answer whose headers say something too: (body, headers).
    parse_answer: Callable[[Any, httpx.Headers], T] | None = None


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
    key: str | None = None,
    if_active: models.IfActive | None = None,
) -> Call[models.Submitted]:
    body = {
        "kind": kind,
        "payload": dict(payload),
        **_job_fields(max_attempts, timeout_seconds, run_at, delay_seconds, priority),
    }
    if deadline is not None:
        body["deadline"] = deadline.isoformat()
    if deadline_seconds is not None:
        body["deadline_seconds"] = deadline_seconds
    if key is not None:
        body["key"] = key
    if if_active is not None:
        body["if_active"] = if_active
    return Call(
        "POST",
        "/v1/jobs",
        models.Submitted.model_validate,
        json=body,
        headers=_keyed(idempotency_key),
        parse_answer=_submitted,
    )


# The headers of a submission's answer: a replay of its Idempotency-Key, or (flow control
# by key, if_active drop_new) the key's active job answered instead of a new one.
REPLAYED = "Idempotent-Replayed"
KEY_DECISION = "Tasklease-Key-Decision"


def _submitted(doc: Any, headers: httpx.Headers) -> models.Submitted:
    return models.Submitted.model_validate(
        {
            **doc,
            "replayed": headers.get(REPLAYED) == "true",
            "dropped": headers.get(KEY_DECISION) == "dropped",
        }
    )


def submit_many(
    items: Iterable[models.JobRequest | Mapping[str, Any]],
) -> Call[list[models.Submitted]]:
    jobs = [
        (i if isinstance(i, models.JobRequest) else models.JobRequest.model_validate(i))
        for i in items
    ]
    body = {"jobs": [j.model_dump(mode="json", exclude_none=True) for j in jobs]}
    return Call(
        "POST",
        "/v1/jobs/batch",
        lambda doc: models.JobBatch.model_validate(doc).submitted(),
        json=body,
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
    if call.parse_answer is not None:
        return call.parse_answer(response.json(), response.headers)
    return call.parse(response.json())


def lost(exc: httpx.TransportError, base_url: httpx.URL) -> errors.ConnectionLost:
    return errors.ConnectionLost(f"cannot reach the tasklease API at {base_url}: {exc!r}")
