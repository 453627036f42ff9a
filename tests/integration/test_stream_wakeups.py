"""Stream wake-ups only while someone follows (migration 0031, issue 37): a write notifies
the stream channel while some API process's hub has readers, and not otherwise, so a
busy system without readers does not serialize its commits on PostgreSQL's notify lock.
A reader still gets every row: a hub that starts following reads again at once."""

from __future__ import annotations

import asyncio
from typing import Any

import psycopg
import pytest

from app import store
from app.services import streams
from app.store.streams import CHANNEL
from tests.conftest import Stack
from tests.helpers import engine_for, submit

pytestmark = [pytest.mark.integration, pytest.mark.carrier_neutral]


def heard(listener: psycopg.Connection[Any], seconds: float) -> list[str]:
    """The stream notifications ``listener`` got within ``seconds``."""
    return [n.payload for n in listener.notifies(timeout=seconds)]


@pytest.mark.asyncio
async def test_writes_wake_the_streams_only_while_a_hub_has_readers(stack: Stack, sql: Any) -> None:
    url = stack.settings.database_url
    assert url
    with psycopg.connect(url, autocommit=True) as listener:
        listener.execute(f"LISTEN {CHANNEL}")
        async with engine_for(stack.settings) as engine, store.connect(url, max_size=1) as db:
            # No hub follows: a submission's event notifies nobody.
            quiet = await submit(engine, "demo.noop", {}, tenant="acme")
            assert heard(listener, 0.5) == []

            # A hub with a reader: its first follow says it had not been woken (read
            # again), later ones within the period write nothing and say so.
            hub = streams.Hub(url, db)
            assert await hub.follow() is True
            assert await hub.follow() is False
            followed = await submit(engine, "demo.noop", {}, tenant="acme")
            assert heard(listener, 2) == [str(followed)]
            assert quiet != followed

            # A lapsed row wakes nobody; the hub's next follow makes it current again.
            sql.execute("UPDATE stream_hubs SET until = now() - interval '1 second'")
            await submit(engine, "demo.noop", {}, tenant="acme")
            assert heard(listener, 0.5) == []
            hub._current_until = 0.0  # as if its period had run out here too
            assert await hub.follow() is True
            again = await submit(engine, "demo.noop", {}, tenant="acme")
            assert heard(listener, 2) == [str(again)]

            # A hub that stops takes its row with it.
            await hub.stop()
            assert sql.execute("SELECT count(*) AS n FROM stream_hubs").fetchone()["n"] == 0
            await submit(engine, "demo.noop", {}, tenant="acme")
            assert heard(listener, 0.5) == []


@pytest.mark.asyncio
async def test_a_reader_on_a_hub_is_woken_by_the_write(stack: Stack, sql: Any) -> None:
    url = stack.settings.database_url
    assert url
    async with engine_for(stack.settings) as engine, store.connect(url, max_size=2) as db:
        hub = streams.Hub(url, db)
        payloads: list[str | None] = []
        wake = hub._wake

        def recorded(payload: str | None) -> None:
            payloads.append(payload)
            wake(payload)

        hub._wake = recorded  # type: ignore[method-assign]
        hub.start()
        try:
            await asyncio.wait_for(hub.connected.wait(), 10)
            horizon = await streams.start_of_all(db)
            poll = asyncio.create_task(
                streams.poll(db, hub, job_id=None, tenant="acme", after=horizon, wait=20)
            )
            while hub._current_until == 0.0:  # the reader has made its hub follow
                await asyncio.sleep(0.01)
            job_id = await submit(engine, "demo.noop", {}, tenant="acme")
            page = await asyncio.wait_for(poll, 25)
        finally:
            await hub.stop()
    # The write woke the hub (its reader did not wait for a poll to find it).
    assert str(job_id) in payloads
    assert [e.job_id for e in page.events] == [job_id]
