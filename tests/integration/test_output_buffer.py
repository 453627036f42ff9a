"""The worker's output buffer against real PostgreSQL: many emits become few statements
(one transaction each), in order; a buffer whose lease moved on is refused and stays
refused, writing nothing."""

from __future__ import annotations

import asyncio
import datetime as dt
import uuid
from typing import Any

import pytest

from app import errors, store
from app.kinds.output import Emitted
from app.worker.output import FLUSH_ITEMS, OutputBuffer
from tests.conftest import Stack
from tests.integration.test_api_waits import submit

# What this module checks does not depend on the carrier: it runs on moto only.
pytestmark = [pytest.mark.integration, pytest.mark.carrier_neutral]


def running(sql: Any, job_id: str) -> uuid.UUID:
    token = uuid.uuid4()
    sql.execute(
        "UPDATE jobs SET state = 'running', lease_token = %s, lease_expires_at = now() + "
        "interval '1 minute', attempt = 1 WHERE id = %s",
        (token, job_id),
    )
    return token


def item(n: int) -> Emitted:
    return Emitted(dt.datetime.now(dt.UTC), "output", {"n": n})


def test_many_emits_are_few_statements_in_order(stack: Stack, api: Any, sql: Any) -> None:
    job = submit(api, {"kind": "demo.noop", "payload": {}})
    token = running(sql, job["id"])

    async def go() -> None:
        assert stack.settings.database_url
        async with store.connect(stack.settings.database_url, max_size=2) as db:
            buf = OutputBuffer(db, uuid.UUID(job["id"]), token)
            for n in range(FLUSH_ITEMS * 2 + 50):
                await buf.add(item(n))
            await buf.close()

    asyncio.run(go())
    rows = sql.execute("SELECT data, tx::text AS tx FROM job_output ORDER BY tx, id").fetchall()
    assert [r["data"]["n"] for r in rows] == list(range(FLUSH_ITEMS * 2 + 50))
    assert len({r["tx"] for r in rows}) == 3  # 100 + 100 + the 50 left at close


def test_a_refused_buffer_writes_nothing_more(stack: Stack, api: Any, sql: Any) -> None:
    job = submit(api, {"kind": "demo.noop", "payload": {}})
    running(sql, job["id"])

    async def go() -> None:
        assert stack.settings.database_url
        async with store.connect(stack.settings.database_url, max_size=2) as db:
            buf = OutputBuffer(db, uuid.UUID(job["id"]), uuid.uuid4())  # a zombie's token
            await buf.add(item(1))
            with pytest.raises(errors.LeaseLost):
                await buf.close()
            with pytest.raises(errors.LeaseLost):
                await buf.add(item(2))
            await buf.close(quiet=True)

    asyncio.run(go())
    assert sql.execute("SELECT count(*) AS n FROM job_output").fetchone()["n"] == 0
