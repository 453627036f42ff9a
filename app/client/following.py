"""What ``wait``, ``wait_state`` and a resumable ``stream`` keep between the requests
they make, written once for the sync and the async client: ``Waiter``, ``StateWaiter``
and ``Resume`` build each next request (app/client/calls.py's ``Call``) and read its
answer; the clients only send them."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import get_args

import httpx
from httpx_sse import ServerSentEvent

from app.client import errors, models
from app.client.calls import MAX_POLL_SECONDS, Call, JobId, _model, error_of, job_path, state_key

# Reconnecting a dropped stream: this many tries in a row, backing off up to RETRY_CAP.
STREAM_RETRIES = 8
RETRY_CAP = 5.0
# The events a job's stream hands out (its SSE frames' names; "end" ends it).
STREAM_EVENT_TYPES = frozenset(get_args(models.StreamEvent.model_fields["type"].annotation))


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
