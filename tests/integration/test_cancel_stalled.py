"""A cancel asked for while a job ran, whose worker's cancelled write comes after the
sweeper marked the job stalled (its lease ran out first): the write is refused by the
fence, and before this fix the message was deleted with the job left stalled and
flagged, which no claim takes and no lost-message look re-sends, so it never ended. The
worker's outcome now cancels it as a job no live lease holds (a review's finding)."""

from __future__ import annotations

import asyncio
import time
import uuid
from typing import Any

import pytest

from app import store
from app.worker.leases import Lease
from app.worker.outcomes import Outcomes
from tests.conftest import Stack, job_row
from tests.helpers import engine_for

pytestmark = pytest.mark.integration


def submitted(api: Any) -> str:
    resp = api.post("/v1/jobs", json={"kind": "demo.noop", "payload": {}})
    assert resp.status_code == 202, resp.text
    return str(resp.json()["id"])


def running(sql: Any, job_id: str) -> uuid.UUID:
    token = uuid.uuid4()
    sql.execute(
        "UPDATE jobs SET state = 'running', lease_token = %s, attempt = 1,"
        " lease_expires_at = now() + interval '1 minute' WHERE id = %s",
        (token, job_id),
    )
    return token


def cancelled_by_worker(stack: Stack, job_id: str, token: uuid.UUID) -> bool:
    lease = Lease(uuid.UUID(job_id), token, "receipt", time.time(), 0)

    async def go() -> bool:
        async with engine_for(stack.settings) as engine:
            return await Outcomes(stack.settings, engine.db, engine.queue).cancelled(lease)

    return asyncio.run(go())


def flag(stack: Stack, job_id: str) -> None:
    async def go() -> bool:
        assert stack.settings.database_url
        async with store.connect(stack.settings.database_url, max_size=2) as db:
            return await store.jobs.request_cancel(db, uuid.UUID(job_id))

    assert asyncio.run(go())


def test_a_flagged_job_the_sweeper_marked_stalled_is_cancelled_by_its_worker(
    api: Any, stack: Stack, sql: Any
) -> None:
    job_id = submitted(api)
    token = running(sql, job_id)
    flag(stack, job_id)
    # The lease ran out and the sweeper marked the job stalled before the worker wrote.
    sql.execute(
        "UPDATE jobs SET state = 'stalled', lease_expires_at = now() - interval '1 hour'"
        " WHERE id = %s",
        (job_id,),
    )
    assert cancelled_by_worker(stack, job_id, token)
    row = job_row(sql, job_id)
    assert (row["state"], row["cancel_requested"]) == ("cancelled", True)
    assert row["finished_at"] is not None
    events = sql.execute(
        "SELECT from_state, to_state FROM job_events WHERE job_id = %s ORDER BY id DESC LIMIT 1",
        (job_id,),
    ).fetchone()
    assert (events["from_state"], events["to_state"]) == ("stalled", "cancelled")


def test_a_job_another_writer_ended_is_left_as_it_is(api: Any, stack: Stack, sql: Any) -> None:
    job_id = submitted(api)
    token = running(sql, job_id)
    flag(stack, job_id)
    sql.execute(
        "UPDATE jobs SET state = 'succeeded', finished_at = now(), lease_token = NULL,"
        " lease_expires_at = NULL WHERE id = %s",
        (job_id,),
    )
    assert not cancelled_by_worker(stack, job_id, token)
    assert job_row(sql, job_id)["state"] == "succeeded"


def test_a_live_lease_of_the_worker_ends_cancelled_by_the_fenced_write(
    api: Any, stack: Stack, sql: Any
) -> None:
    job_id = submitted(api)
    token = running(sql, job_id)
    flag(stack, job_id)
    assert cancelled_by_worker(stack, job_id, token)
    assert job_row(sql, job_id)["state"] == "cancelled"
