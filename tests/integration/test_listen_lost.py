"""A LISTEN connection dropped without a word (a NAT's idle timeout, a failover) is
noticed and replaced (issue 30, item 15): before, the cancel listener and the stream hub
waited on a dead connection for ever, with no error, and cancels and streams stopped
reaching that process. Here a TCP proxy between the listener and the real PostgreSQL
swallows everything on the connections it holds, as a dropped NAT mapping does, while
new connections go through."""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from typing import Any

import psycopg
import pytest
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from app import errors, store
from app.services import streams as hub_mod

pytestmark = pytest.mark.integration


class SilentDrop:
    """A TCP proxy to PostgreSQL; ``drop()`` makes the connections it holds swallow every
    byte both ways (read and thrown away: nothing closes, the kernel still acknowledges),
    while connections made after it are forwarded as usual."""

    def __init__(self, host: str, port: int) -> None:
        self.host, self.port = host, port
        self.held: list[dict[str, bool]] = []
        self.server: asyncio.Server | None = None
        self.tasks: set[asyncio.Task[None]] = set()
        self.writers: list[asyncio.StreamWriter] = []

    async def start(self) -> int:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        return int(self.server.sockets[0].getsockname()[1])

    def drop(self) -> None:
        for conn in self.held:
            conn["dropped"] = True

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self.host.startswith("/"):  # the embedded server's socket directory
            up_reader, up_writer = await asyncio.open_unix_connection(
                f"{self.host}/.s.PGSQL.{self.port}"
            )
        else:
            up_reader, up_writer = await asyncio.open_connection(self.host, self.port)
        self.writers += [writer, up_writer]
        conn = {"dropped": False}
        self.held.append(conn)
        pumps = [
            asyncio.create_task(self._pump(src, dst, conn))
            for src, dst in ((reader, up_writer), (up_reader, writer))
        ]
        self.tasks.update(pumps)
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.gather(*pumps)  # the connection lives as long as this handler

    async def _pump(
        self, src: asyncio.StreamReader, dst: asyncio.StreamWriter, conn: dict[str, bool]
    ) -> None:
        with contextlib.suppress(ConnectionError, OSError):
            while data := await src.read(65536):
                if not conn["dropped"]:
                    dst.write(data)
                    await dst.drain()
            dst.close()  # the other side closed: so does this one (unless dropped)

    async def close(self) -> None:
        for task in self.tasks:
            task.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)
        for writer in self.writers:
            writer.close()
            with contextlib.suppress(ConnectionError, OSError):
                await writer.wait_closed()
        if self.server is not None:
            self.server.close()
            await self.server.wait_closed()


@pytest.fixture
def quick_pings(monkeypatch: pytest.MonkeyPatch) -> None:
    """Pings every 0.3 s, lost after 1 s without an answer (30 s and 10 s in production)."""
    monkeypatch.setattr(store.streams, "PING_SECONDS", 0.3)
    monkeypatch.setattr(store.streams, "PING_TIMEOUT_SECONDS", 1.0)


async def proxied(database_url: str) -> tuple[SilentDrop, str]:
    params = conninfo_to_dict(database_url)
    proxy = SilentDrop(str(params.get("host") or "127.0.0.1"), int(params.get("port") or 5432))
    port = await proxy.start()
    return proxy, make_conninfo(database_url, host="127.0.0.1", port=port)


async def notify(database_url: str, channel: str, payload: str) -> None:
    async with await psycopg.AsyncConnection.connect(database_url, autocommit=True) as conn:
        await conn.execute("SELECT pg_notify(%s, %s)", (channel, payload))


@pytest.mark.asyncio
@pytest.mark.usefixtures("quick_pings")
async def test_a_silently_dropped_listener_raises_instead_of_waiting_for_ever(
    database_url: str,
) -> None:
    proxy, url = await proxied(database_url)
    try:
        ready = asyncio.Event()
        notes = store.cancels.listen(url, ready)
        first = asyncio.ensure_future(anext(notes))
        await asyncio.wait_for(ready.wait(), 10)
        job = str(uuid.uuid4())
        await notify(database_url, store.cancels.CHANNEL, job)
        assert await asyncio.wait_for(first, 10) == job  # it works through the proxy

        proxy.drop()
        with pytest.raises(errors.StoreError, match="no answer to a ping"):
            await asyncio.wait_for(anext(notes), 10)
    finally:
        await proxy.close()


@pytest.mark.asyncio
@pytest.mark.usefixtures("quick_pings")
async def test_the_stream_hub_reconnects_after_a_silent_drop_and_wakes_its_readers(
    database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    woken: list[Any] = []
    proxy, url = await proxied(database_url)
    hub = hub_mod.Hub(url)
    monkeypatch.setattr(hub, "_wake", woken.append)
    hub.start()
    try:
        await asyncio.wait_for(hub.connected.wait(), 10)
        proxy.drop()  # its connection now hears nothing and says nothing
        # It notices (a ping unanswered), wakes its readers to catch up from the tables,
        # and connects again: through the proxy, which forwards a new connection.
        async with asyncio.timeout(15):
            while None not in woken:
                await asyncio.sleep(0.05)
            await hub.connected.wait()
        job = str(uuid.uuid4())
        await notify(database_url, store.streams.CHANNEL, job)
        async with asyncio.timeout(10):
            while job not in woken:
                await asyncio.sleep(0.05)
    finally:
        await hub.stop()
        await proxy.close()
