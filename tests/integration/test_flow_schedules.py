"""A schedule's slot is one more submission of its key (issue 35): its job carries its
key and its kind's limits per key, and its kind's submit-time policy applies to it, a
debounce replacing the slot before it that is still waiting its window."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pytest

from app.states import JobState
from tests import flow_kinds
from tests.conftest import Stack
from tests.integration.test_schedules import YEARLY, created, make_due, schedule_row, sweep

if TYPE_CHECKING:
    from fastapi.testclient import TestClient

pytestmark = pytest.mark.integration


def slot_jobs(sql: Any, schedule_id: Any) -> list[dict[str, Any]]:
    return sql.execute(  # type: ignore[no-any-return]
        "SELECT * FROM jobs WHERE idempotency_key LIKE %s ORDER BY created_at",
        (f"schedule:{schedule_id}:%",),
    ).fetchall()


@pytest.mark.asyncio
async def test_a_slots_job_carries_its_key_and_its_kinds_limits(
    api: TestClient, stack: Stack, sql: Any
) -> None:
    made = created(api, {**YEARLY, "kind": "demo.converse", "payload": {"conversation": "c-9"}})
    make_due(sql, made["id"])
    assert (await sweep(stack)).scheduled == 1
    (job,) = slot_jobs(sql, made["id"])
    assert (job["flow_key"], job["key_concurrency"], job["state"]) == ("c-9", 1, JobState.QUEUED)


@pytest.mark.asyncio
async def test_a_debounced_kinds_slot_replaces_the_slot_still_waiting_its_window(
    api: TestClient, stack: Stack, sql: Any
) -> None:
    made = created(api, {**YEARLY, "kind": "demo.reindex", "payload": {"document": "d"}})
    make_due(sql, made["id"])
    await sweep(stack)
    (first,) = slot_jobs(sql, made["id"])
    assert (first["state"], first["wait_key"], first["flow_key"]) == (
        JobState.WAITING,
        "debounce",
        "d",
    )
    # A later slot (five minutes apart: a minute's edge between the sweeps cannot make
    # it the first one's) while the first still waits its 2 s window.
    make_due(sql, made["id"], minutes_late=5)
    await sweep(stack)
    first_now, second = slot_jobs(sql, made["id"])
    assert first_now["state"] == JobState.CANCELLED
    assert second["state"] == JobState.WAITING
    detail = sql.execute(
        "SELECT detail FROM job_events WHERE job_id = %s AND to_state = 'cancelled'",
        (first["id"],),
    ).fetchone()["detail"]
    assert detail == f"debounced: replaced by job {second['id']}, a newer job of its key"
    assert schedule_row(sql, made["id"])["last_job_id"] == second["id"]


@pytest.mark.asyncio
async def test_a_rejecting_kinds_slot_makes_no_job_while_the_keys_job_is_active(
    api: TestClient, stack: Stack, sql: Any
) -> None:
    """test.flow_reject (if_active reject): the slot after one whose job is still queued
    makes no job, says why, and moves on to the next slot."""
    with flow_kinds.registered():
        made = created(api, {**YEARLY, "kind": "test.flow_reject", "payload": {"account": "a"}})
        make_due(sql, made["id"])
        await sweep(stack)
        (first,) = slot_jobs(sql, made["id"])
        make_due(sql, made["id"], minutes_late=5)
        await sweep(stack)
    assert [j["id"] for j in slot_jobs(sql, made["id"])] == [first["id"]]
    row = schedule_row(sql, made["id"])
    assert str(first["id"]) in row["last_error"], row["last_error"]
    assert "if_active is 'reject'" in row["last_error"], row["last_error"]
    assert row["last_job_id"] == first["id"]
