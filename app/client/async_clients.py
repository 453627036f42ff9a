"""``AsyncClient``: ``Client`` (app/client/clients.py) with ``await``; both send the calls
app/client/calls.py builds and parse the answers it reads; the loops of ``wait`` and
``stream`` are the only code written twice, a few lines each, around the shared
``Waiter`` and ``Resume`` (app/client/following.py)."""

from __future__ import annotations

import asyncio
import datetime as dt
from collections.abc import AsyncIterator, Callable, Iterable, Mapping
from types import TracebackType
from typing import Any, Self, TypeVar

import httpx
from httpx_sse import aconnect_sse

from app.client import calls, errors, following, models
from app.client.calls import JobId
from app.client.clients import headers_for, stream_timeout

T = TypeVar("T")
OnEvent = Callable[[models.StreamEvent], object]


class AsyncClient:
    """The tasklease HTTP API, for asyncio: ``Client``'s methods, awaited."""

    def __init__(
        self,
        base_url: str,
        api_key: str | None,
        *,
        timeout: float = 30.0,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self.timeout = timeout
        self.http = httpx.AsyncClient(
            base_url=base_url, headers=headers_for(api_key), timeout=timeout, transport=transport
        )
        self.callbacks = AsyncCallbacks(self)

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self.http.aclose()

    async def send(self, call: calls.Call[T]) -> T:
        try:
            response = await self.http.request(**calls.request_args(call, self.timeout))
        except httpx.TransportError as exc:
            raise calls.lost(exc, self.http.base_url) from exc
        return calls.result(call, response)

    async def submit(
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
        return await self.send(
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

    async def submit_many(
        self, items: Iterable[models.JobRequest | Mapping[str, Any]]
    ) -> list[models.Submitted]:
        return await self.send(calls.submit_many(items))

    async def kinds(self) -> list[models.KindInfo]:
        """The job kinds the deployment runs, each with its payload's JSON schema and its
        jobs by state."""
        return await self.send(calls.kinds())

    async def workers(self) -> list[models.WorkerInfo]:
        """Admin: the worker processes and Lambda environments, most recently seen first."""
        return await self.send(calls.workers())

    async def get(self, job_id: JobId) -> models.JobDetail:
        return await self.send(calls.get(job_id))

    async def cancel(self, job_id: JobId) -> models.Job:
        return await self.send(calls.cancel(job_id))

    async def redrive(self, job_id: JobId, force: bool = False) -> models.Job:
        return await self.send(calls.redrive(job_id, force))

    async def rerun(
        self,
        job_id: JobId,
        payload: dict[str, Any] | None = None,
        *,
        idempotency_key: str | None = None,
    ) -> models.Job:
        """As ``Client.rerun``."""
        return await self.send(calls.rerun(job_id, payload, idempotency_key))

    async def fork(
        self,
        job_id: JobId,
        step: str | None = None,
        payload: dict[str, Any] | None = None,
        *,
        idempotency_key: str | None = None,
    ) -> models.Fork:
        """As ``Client.fork``."""
        return await self.send(calls.fork(job_id, step, payload, idempotency_key))

    async def send_message(
        self, job_id: JobId, topic: str, body: Any = None, *, idempotency_key: str | None = None
    ) -> models.MessageSent:
        """As ``Client.send_message``."""
        return await self.send(calls.send_message(job_id, topic, body, idempotency_key))

    async def messages(self, job_id: JobId) -> list[models.Message]:
        return await self.send(calls.messages(job_id))

    async def state(self, job_id: JobId) -> dict[str, models.StateValue]:
        return await self.send(calls.state(job_id))

    async def wait_state(
        self,
        job_id: JobId,
        key: str,
        *,
        after_version: int = 0,
        # Client.wait_state's signature: the deadline bounds each long poll.
        timeout: float = 60.0,  # noqa: ASYNC109
    ) -> models.StateValue:
        waiter = following.StateWaiter(job_id, key, after_version, timeout)
        while True:
            try:
                value: models.StateValue | None = await self.send(waiter.poll())
            except errors.NotFound:
                value = None
            if waiter.past(value):
                assert value is not None
                return value
            final = waiter.answer(await self.get(job_id))
            if final is not None:
                return final

    async def wait(
        self,
        job_id: JobId,
        *,
        # Client.wait's signature: the deadline bounds each long poll, not one await.
        timeout: float,  # noqa: ASYNC109
        on_event: OnEvent | None = None,
    ) -> models.JobDetail:
        waiter = following.Waiter(job_id, timeout, on_event)
        job = await self.get(job_id)
        while not waiter.finished(job):
            if waiter.saw(await self.send(waiter.poll(self.timeout))):
                job = await self.get(job_id)
        return job

    def stream(
        self, job_id: JobId, *, after: str | None = None
    ) -> AsyncIterator[models.StreamEvent]:
        return self._follow(following.Resume(job_id, after))

    def stream_all(
        self, *, tenant: str | None = None, after: str | None = None
    ) -> AsyncIterator[models.StreamEvent]:
        return self._follow(following.Resume(None, after, tenant=tenant))

    async def _follow(self, resume: following.Resume) -> AsyncIterator[models.StreamEvent]:
        while not resume.ended:
            try:
                async with aconnect_sse(
                    self.http,
                    "GET",
                    resume.path,
                    params=resume.params,
                    headers=resume.headers(),
                    timeout=stream_timeout(self.timeout),
                ) as source:
                    if source.response.is_error:
                        await source.response.aread()
                    if not resume.answered(source.response):
                        break  # the API answers long polls only: follow by poll below
                    async for sse in source.aiter_sse():
                        event = resume.accept(sse)
                        if event is not None:
                            yield event
                        if resume.ended:
                            return
                    dropped: Exception | None = None
            except httpx.TransportError as exc:
                dropped = exc
            await asyncio.sleep(resume.dropped(dropped))
        while not resume.ended:
            for event in resume.take(await self.send(resume.poll(self.timeout))):
                yield event


class AsyncCallbacks:
    def __init__(self, client: AsyncClient) -> None:
        self._client = client

    async def complete(
        self, token: str, result: Any = calls.UNSET, *, error: str | None = None
    ) -> models.CallbackAnswered:
        return await self._client.send(calls.complete(token, result, error))

    async def heartbeat(self, token: str) -> models.CallbackHeartbeat:
        return await self._client.send(calls.heartbeat(token))
