"""A worker SIGKILLed right after a kind published state (the after_state_published crash
point) and a second worker that finishes the job: the re-run publishes what the dead
attempt published again, which changes nothing (no new version, no repeated stream
event), and every later change is a new version; no key ever goes back in time."""

from __future__ import annotations

from typing import Any

import pytest

from app.crashpoints import Point
from app.states import JobState
from tests.conftest import Stack
from tests.e2e.test_crash_points import died_by_sigkill, submit
from tests.helpers import crash_env
from tests.invariants import check_invariants, describe, effects, wait_for_state

pytestmark = pytest.mark.e2e

STEPS = 3


def published(sql: Any, job_id: str) -> dict[str, tuple[Any, int, int]]:
    rows = sql.execute(
        "SELECT key, value, version, attempt FROM published_state WHERE job_id = %s", (job_id,)
    ).fetchall()
    return {r["key"]: (r["value"], r["version"], r["attempt"]) for r in rows}


def state_events(sql: Any, job_id: str) -> list[tuple[str, Any, int, int]]:
    rows = sql.execute(
        "SELECT data, attempt FROM job_output WHERE job_id = %s AND type = 'state' ORDER BY tx, id",
        (job_id,),
    ).fetchall()
    return [
        (r["data"]["key"], r["data"]["value"], r["data"]["version"], r["attempt"]) for r in rows
    ]


@pytest.mark.asyncio
async def test_a_worker_killed_after_publishing_state_leaves_no_key_back_in_time(
    stack: Stack, sql: Any, api: Any
) -> None:
    # Given a worker armed to die once the job published "done" the first time (after
    # its first step was recorded).
    doomed = stack.worker(env=crash_env(f"{Point.AFTER_STATE_PUBLISHED}@done"), name="doomed")
    job_id = await submit(stack, "demo.publish", {"steps": STEPS}, tenant="acme")
    died_by_sigkill(doomed, "the worker armed at after_state_published@done")
    # When it dies there, what it published is committed, and nothing after it.
    assert published(sql, job_id) == {"phase": ("working", 1, 1), "done": (1, 1, 1)}, describe(
        sql, job_id
    )
    assert [e["key"] for e in effects(sql, job_id)] == ["step-0"]
    check_invariants(sql, stack, [job_id], settled=False)

    # Then a second worker finishes it: its replay published phase=working and done=1
    # again (no change), and each later value is one new version.
    stack.worker(name="rescuer")
    row = wait_for_state(sql, job_id, JobState.SUCCEEDED, timeout=90)
    assert row["attempt"] == 2, describe(sql, job_id)
    assert published(sql, job_id) == {"phase": ("finished", 2, 2), "done": (STEPS, STEPS, 2)}
    assert state_events(sql, job_id) == [
        ("phase", "working", 1, 1),
        ("done", 1, 1, 1),
        ("done", 2, 2, 2),
        ("done", 3, 3, 2),
        ("phase", "finished", 2, 2),
    ]
    check_invariants(sql, stack, [job_id])

    # And a caller reads the same through the API.
    items = api.get(f"/v1/jobs/{job_id}/state").json()["items"]
    assert {i["key"]: (i["value"], i["version"]) for i in items} == {
        "done": (STEPS, STEPS),
        "phase": ("finished", 2),
    }
