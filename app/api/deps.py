"""What the routes need from the process, handed to them as FastAPI dependencies.

The long-lived clients (the database pool, the queue, the outbox sender, the key
verifier) live in one Runtime on ``app.state.runtime``. The app's lifespan opens and
closes it under uvicorn; under Lambda, handlers/api.py turns Mangum's per-invocation
lifespan off so a warm function keeps its pool, and the first request opens it instead
(every dependency below goes through ``runtime_of``, a no-op once open).
"""

from __future__ import annotations

import asyncio
import dataclasses
from typing import Annotated

from fastapi import Depends, Request

from app import errors, transport
from app.services import auth, outbox, server_secret, streams
from app.settings import config
from app.store.pool import Database
from app.transport import Transport, secrets


@dataclasses.dataclass(frozen=True)
class _Clients:
    """What one opening built: a psycopg pool cannot be reopened once closed, so each
    opening builds its own, and the sender and the verifier that use it."""

    db: Database
    keys: auth.KeyVerifier
    sender: outbox.OutboxSender


class Runtime:
    """The API's long-lived clients, opened at most once at a time."""

    def __init__(self, settings: config.Settings) -> None:
        settings.need("database_url", "queue_url", "dlq_url")
        self.settings = settings
        self.queue = transport.create(settings)
        self._clients: _Clients | None = None
        self._lock = asyncio.Lock()
        # Started by the first stream request (a Lambda answering long polls has none).
        self.streaming = True
        # GET /metrics (off under Lambda: no key guards it, and EMF carries the figures).
        self.serve_metrics = True
        # Sent outbox rows marked a moment later, together (off under Lambda, whose
        # process may be frozen once it answers: services/outbox.py, SendRecords).
        self.record_sends_later = True
        self._hub: streams.Hub | None = None

    def _opened(self) -> _Clients:
        if self._clients is None:
            raise errors.StoreError("the API's database pool is not open")
        return self._clients

    @property
    def db(self) -> Database:
        return self._opened().db

    @property
    def keys(self) -> auth.KeyVerifier:
        return self._opened().keys

    @property
    def sender(self) -> outbox.OutboxSender:
        return self._opened().sender

    async def open(self) -> None:
        if self._clients is not None:
            return  # every request asks: no lock taken once open
        async with self._lock:
            if self._clients is not None:
                return
            s = self.settings
            db = Database(
                secrets.database_url(s), min_size=s.pool_min_size, max_size=s.pool_max_size
            )
            await db.open(wait=False)
            await self.queue.open()
            keys = auth.KeyVerifier(
                db,
                secret=server_secret.bind(db, server_secret.configured(s)),
                failure_limit=s.auth_failure_limit,
            )
            records = outbox.SendRecords(db) if self.record_sends_later else None
            sender = outbox.OutboxSender(db, self.queue, records)
            self._clients = _Clients(db=db, keys=keys, sender=sender)

    def stream_hub(self) -> streams.Hub | None:
        """This process's stream listener, started on first use; None where readers poll."""
        if not self.streaming:
            return None
        if self._hub is None:
            self._hub = streams.Hub(secrets.database_url(self.settings), self.db)
            self._hub.start()
        return self._hub

    async def close(self) -> None:
        async with self._lock:
            if self._hub is not None:
                await self._hub.stop()
                self._hub = None
            if self._clients is None:
                return
            await self._clients.sender.close()
            await self.queue.close()
            await self._clients.db.close()
            self._clients = None


async def runtime_of(request: Request) -> Runtime:
    """The API's runtime, its clients open (a no-op once open)."""
    runtime: Runtime = request.app.state.runtime
    await runtime.open()
    return runtime


# The dependencies are coroutines: FastAPI would run plain functions in a thread.
async def _settings(runtime: Annotated[Runtime, Depends(runtime_of)]) -> config.Settings:
    return runtime.settings


async def _db(runtime: Annotated[Runtime, Depends(runtime_of)]) -> Database:
    return runtime.db


async def _queue(runtime: Annotated[Runtime, Depends(runtime_of)]) -> Transport:
    return runtime.queue


async def _sender(runtime: Annotated[Runtime, Depends(runtime_of)]) -> outbox.OutboxSender:
    return runtime.sender


def client_keys(request: Request, runtime: Runtime) -> auth.ClientKeys:
    # The address the connection came from (under Lambda: API Gateway's sourceIp), never
    # a header a client can write: the key throttle counts failures per address.
    return runtime.keys.for_client(request.client.host if request.client else None)


async def _keys(
    request: Request, runtime: Annotated[Runtime, Depends(runtime_of)]
) -> auth.ClientKeys:
    return client_keys(request, runtime)


# The whole runtime as one dependency: what a hot route (submitting) takes instead of
# four, each of which FastAPI resolves on every request.
Clients = Annotated[Runtime, Depends(runtime_of)]
Settings = Annotated[config.Settings, Depends(_settings)]
Db = Annotated[Database, Depends(_db)]
JobQueue = Annotated[Transport, Depends(_queue)]
Sender = Annotated[outbox.OutboxSender, Depends(_sender)]
Keys = Annotated[auth.ClientKeys, Depends(_keys)]
