"""``Client`` (sync) and ``AsyncClient``: they send the calls app/client/calls.py builds
and parse the answers it reads; the loops of ``wait`` and ``stream`` are the only code
written twice, a few lines each, around the shared ``Waiter`` and ``Resume``."""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from types import TracebackType
from typing import Any, Self, TypeVar

import httpx
from httpx_sse import connect_sse

from app.client import calls, errors, following, models
from app.client.calls import JobId

T = TypeVar("T")
OnEvent = Callable[[models.StreamEvent], object]


def headers_for(api_key: str | None) -> dict[str, str]:
    return {"Authorization": f"Bearer {api_key}"} if api_key else {}


def stream_timeout(timeout: float) -> httpx.Timeout:
    return httpx.Timeout(timeout, read=following.STREAM_READ_TIMEOUT)


class Client:
    """The tasklease HTTP API, synchronously. ``api_key`` may be None for a party that
    only answers callbacks (the token is the credential)."""

    def __init__(
        self,
        base_url: str,
        api_key: str | None,
        *,
        timeout: float = 30.0,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        self.timeout = timeout
        self.http = httpx.Client(
            base_url=base_url, headers=headers_for(api_key), timeout=timeout, transport=transport
        )
        self.callbacks = Callbacks(self)

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def close(self) -> None:
        self.http.close()

    def send(self, call: calls.Call[T]) -> T:
        try:
            response = self.http.request(**calls.request_args(call, self.timeout))
        except httpx.TransportError as exc:
            raise calls.lost(exc, self.http.base_url) from exc
        return calls.result(call, response)

    def submit(
        self,
        kind: str,
        payload: Mapping[str, Any],
        *,
        idempotency_key: str | None = None,
        max_attempts: int | None = None,
        timeout_seconds: int | None = None,
        run_at: dt.datetime | None = None,
        delay_seconds: float | None = None,
        priority: models.Priority | str | None = None,
        deadline: dt.datetime | None = None,
        deadline_seconds: float | None = None,
        key: str | None = None,
        if_active: models.IfActive | None = None,
    ) -> models.Submitted:
        """Submit a job; it is durable when this returns. ``priority``: high, normal
        (the default) or low. ``deadline`` (an aware time) or ``deadline_seconds``: the
        whole run's; past it the job ends dead-lettered, "deadline passed". ``key``: the
        job's flow-control key (default: its kind's, from the payload) and ``if_active``
        what it does while a job of its key is active (default: its kind's). The answer's
        ``replayed`` says an earlier request with this idempotency key made the job;
        ``dropped``, that it is the key's active job and nothing was written (drop_new)."""
        return self.send(
            calls.submit(
                kind,
                payload,
                idempotency_key=idempotency_key,
                max_attempts=max_attempts,
                timeout_seconds=timeout_seconds,
                run_at=run_at,
                delay_seconds=delay_seconds,
                priority=priority,
                deadline=deadline,
                deadline_seconds=deadline_seconds,
                key=key,
                if_active=if_active,
            )
        )

    def submit_many(
        self, items: Iterable[models.JobRequest | Mapping[str, Any]]
    ) -> list[models.Submitted]:
        """Submit up to 100 jobs, all or none; the jobs in the same order, each with its
        ``replayed`` and ``dropped`` as ``submit`` answers them."""
        return self.send(calls.submit_many(items))

    def kinds(self) -> list[models.KindInfo]:
        """The job kinds the deployment runs, each with its payload's JSON schema and its
        jobs by state."""
        return self.send(calls.kinds())

    def workers(self) -> list[models.WorkerInfo]:
        """Admin: the worker processes and Lambda environments, most recently seen first."""
        return self.send(calls.workers())

    def get(self, job_id: JobId) -> models.JobDetail:
        return self.send(calls.get(job_id))

    def cancel(self, job_id: JobId) -> models.Job:
        return self.send(calls.cancel(job_id))

    def redrive(self, job_id: JobId, force: bool = False) -> models.Job:
        return self.send(calls.redrive(job_id, force))

    def rerun(
        self,
        job_id: JobId,
        payload: dict[str, Any] | None = None,
        *,
        idempotency_key: str | None = None,
    ) -> models.Job:
        """Re-run a finished job as a new job (its payload, or ``payload``); with
        ``idempotency_key`` a retry answers the re-run the first call made."""
        return self.send(calls.rerun(job_id, payload, idempotency_key))

    def fork(
        self,
        job_id: JobId,
        step: str | None = None,
        payload: dict[str, Any] | None = None,
        *,
        idempotency_key: str | None = None,
    ) -> models.Fork:
        """Fork a finished job from ``step``: a new job inheriting the steps before it
        (``step`` None: every recorded step, so it runs from the step it failed in)."""
        return self.send(calls.fork(job_id, step, payload, idempotency_key))

    def send_message(
        self, job_id: JobId, topic: str, body: Any = None, *, idempotency_key: str | None = None
    ) -> models.MessageSent:
        """Send the job a message on ``topic`` (its ``ctx.receive(topic)`` reads it); with
        ``idempotency_key``, sending it again stores nothing more."""
        return self.send(calls.send_message(job_id, topic, body, idempotency_key))

    def messages(self, job_id: JobId) -> list[models.Message]:
        """The job's messages, oldest first."""
        return self.send(calls.messages(job_id))

    def state(self, job_id: JobId) -> dict[str, models.StateValue]:
        """Every key the job published (``ctx.set_state``), key to value and version."""
        return self.send(calls.state(job_id))

    def wait_state(
        self, job_id: JobId, key: str, *, after_version: int = 0, timeout: float = 60.0
    ) -> models.StateValue:
        """The job's ``key`` once its version is past ``after_version`` (0: once it is
        set), following it by long poll. Timeout when ``timeout`` seconds pass first; a
        finished job's key as it is (compare the version), NotFound if it never was set."""
        waiter = following.StateWaiter(job_id, key, after_version, timeout)
        while True:
            try:
                value: models.StateValue | None = self.send(waiter.poll())
            except errors.NotFound:
                value = None
            if waiter.past(value):
                assert value is not None
                return value
            final = waiter.answer(self.get(job_id))
            if final is not None:
                return final

    def wait(
        self, job_id: JobId, *, timeout: float, on_event: OnEvent | None = None
    ) -> models.JobDetail:
        """The job once it is finished (succeeded, dead_lettered or cancelled), following
        its stream by long poll; ``on_event`` sees each event meanwhile. Timeout (naming
        the job and its last state) when ``timeout`` seconds pass first."""
        waiter = following.Waiter(job_id, timeout, on_event)
        job = self.get(job_id)
        while not waiter.finished(job):
            if waiter.saw(self.send(waiter.poll(self.timeout))):
                job = self.get(job_id)
        return job

    def stream(self, job_id: JobId, *, after: str | None = None) -> Iterator[models.StreamEvent]:
        """The job's events from its start (or after the event id ``after``) until it is
        finished; a dropped connection is resumed with Last-Event-ID, nothing repeated
        or skipped."""
        return self._follow(following.Resume(job_id, after))

    def stream_all(
        self, *, tenant: str | None = None, after: str | None = None
    ) -> Iterator[models.StreamEvent]:
        """Every event of the key's tenant's jobs (an admin key: every tenant's, or
        ``tenant``'s) from now (or after the event id ``after``), as they happen, until
        the caller stops reading; a dropped connection is resumed with Last-Event-ID."""
        return self._follow(following.Resume(None, after, tenant=tenant))

    def _follow(self, resume: following.Resume) -> Iterator[models.StreamEvent]:
        while not resume.ended:
            try:
                with connect_sse(
                    self.http,
                    "GET",
                    resume.path,
                    params=resume.params,
                    headers=resume.headers(),
                    timeout=stream_timeout(self.timeout),
                ) as source:
                    if source.response.is_error:
                        source.response.read()
                    if not resume.answered(source.response):
                        break  # the API answers long polls only: follow by poll below
                    for sse in source.iter_sse():
                        event = resume.accept(sse)
                        if event is not None:
                            yield event
                        if resume.ended:
                            return
                    dropped: Exception | None = None
            except httpx.TransportError as exc:
                dropped = exc
            time.sleep(resume.dropped(dropped))
        while not resume.ended:
            yield from resume.take(self.send(resume.poll(self.timeout)))


class Callbacks:
    """Answering a job's callback with its token (no API key needed)."""

    def __init__(self, client: Client) -> None:
        self._client = client

    def complete(
        self, token: str, result: Any = calls.UNSET, *, error: str | None = None
    ) -> models.CallbackAnswered:
        """Complete the callback with ``result`` (any JSON) or fail it with ``error``."""
        return self._client.send(calls.complete(token, result, error))

    def heartbeat(self, token: str) -> models.CallbackHeartbeat:
        return self._client.send(calls.heartbeat(token))
