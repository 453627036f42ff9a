"""Flow control by key under real SIGKILLs (issue 35): the three crash points of its
transitions, each in a real process killed there, then the recovery and every invariant.

- after_key_release: a worker dies once the job parked behind its key was released
  (unparked, outbox row committed), before the message went: the relay sends it, the
  key still runs one job at a time, each job ends once.
- after_debounce_replaced: the API dies once a newer job of a debounced key committed
  (the earlier one cancelled), before its wake-up was marked or sent: the sweeper sends
  it, and exactly the last job runs.
- after_active_cancelled: the API dies once a new job committed with its key's running
  job asked to stop (if_active cancel_active), before its message went: the new job
  still runs, the old one ends cancelled, and the two never run at the same time.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
from typing import Any

import httpx
import pytest

from app.crashpoints import Point
from app.states import JobState
from tests.conftest import Stack, api_client, job_row, wait_for
from tests.e2e.test_crash_points import OWN_TESTS, died_by_sigkill, submit
from tests.e2e.test_wait_crash_points import sweep_once
from tests.helpers import crash_env
from tests.invariants import check_invariants, describe, timeline, wait_for_state

pytestmark = pytest.mark.e2e

FLOW_POINTS = {Point.AFTER_KEY_RELEASE, Point.AFTER_DEBOUNCE_REPLACED, Point.AFTER_ACTIVE_CANCELLED}


def test_each_flow_crash_point_is_left_to_this_module_by_the_crash_points_list() -> None:
    assert FLOW_POINTS <= OWN_TESTS


def when(row: dict[str, Any], field: str) -> dt.datetime:
    return dt.datetime.fromisoformat(row["result"][field])


def armed_api(stack: Stack, point: Point) -> tuple[str, Any]:
    """An API process armed to die at ``point``: its URL and its process."""
    stack.env.update(crash_env(point))
    try:
        url = stack.api()
    finally:
        for var in crash_env(point):
            del stack.env[var]
    return url, stack.procs[-1]


def post_dying(client: httpx.Client, body: dict[str, Any]) -> None:
    """A POST whose API is killed before it answers (or just after: either is fine)."""
    with contextlib.suppress(httpx.TransportError):
        client.post("/v1/jobs", json=body)


def unsent_rows(sql: Any, job_id: Any) -> int:
    return int(
        sql.execute(
            "SELECT count(*) AS n FROM outbox WHERE job_id = %s AND sent_at IS NULL", (job_id,)
        ).fetchone()["n"]
    )


def runs_of(sql: Any, job_id: Any) -> list[dict[str, Any]]:
    return [e for e in timeline(sql, job_id) if e["to_state"] == JobState.RUNNING]


@pytest.mark.asyncio
async def test_a_worker_killed_after_a_key_release_leaves_the_job_to_the_outbox_relay(
    stack: Stack, sql: Any
) -> None:
    # Given two messages to one conversation: the first waits on a 2 s timer (holding its
    # key), so the second's claim finds the key held and parks it.
    first = await submit(stack, "demo.converse", {"conversation": "k", "wait_seconds": 2})
    second = await submit(stack, "demo.converse", {"conversation": "k", "seconds": 0})

    # When a worker armed at after_key_release runs the first, parks the second, and, as
    # the first ends, releases the second (committed) and dies before sending it.
    doomed = stack.worker(env=crash_env(Point.AFTER_KEY_RELEASE), name="doomed")
    await asyncio.to_thread(died_by_sigkill, doomed, "the worker armed at after_key_release")
    assert job_row(sql, first)["state"] == JobState.SUCCEEDED, describe(sql, first)
    row = job_row(sql, second)
    assert (row["state"], row["parked"], row["attempt"]) == (JobState.QUEUED, False, 0), describe(
        sql, second
    )
    assert unsent_rows(sql, second) == 1, "the release's outbox row committed, never sent"

    # Then the relay sends it; a healthy worker runs it once, after the first ended.
    await asyncio.to_thread(sweep_once, stack)
    stack.worker(name="rescuer")
    row = await asyncio.to_thread(wait_for_state, sql, second, JobState.SUCCEEDED, timeout=60)
    assert row["attempt"] == 1, describe(sql, second)
    assert unsent_rows(sql, second) == 0
    a, b = job_row(sql, first), job_row(sql, second)
    assert when(a, "ended_at") <= when(b, "started_at"), "one run of the key at a time"
    assert [len(runs_of(sql, j)) for j in (first, second)] == [2, 1]  # the first: woken once
    check_invariants(sql, stack, [first, second])


@pytest.mark.asyncio
async def test_an_api_killed_after_a_debounce_replaced_a_job_leaves_the_wakeup_to_the_sweeper(
    stack: Stack, sql: Any
) -> None:
    # Given an API armed at after_debounce_replaced, and a first edit of a document
    # (debounced 2 s: nothing replaced, so it answers).
    key = stack.key("acme")
    url, api_proc = armed_api(stack, Point.AFTER_DEBOUNCE_REPLACED)
    with api_client(url, key) as client:
        resp = client.post(
            "/v1/jobs", json={"kind": "demo.reindex", "payload": {"document": "d", "revision": 1}}
        )
        assert resp.status_code == 202, resp.text
        first = resp.json()["id"]
        # When a second edit replaces it: the API dies once that committed.
        post_dying(client, {"kind": "demo.reindex", "payload": {"document": "d", "revision": 2}})
    await asyncio.to_thread(died_by_sigkill, api_proc, "the API armed at after_debounce_replaced")
    rows = sql.execute("SELECT * FROM jobs ORDER BY created_at").fetchall()
    assert [str(r["id"]) for r in rows[:1]] == [first] and len(rows) == 2, rows
    last = rows[1]["id"]
    assert rows[0]["state"] == JobState.CANCELLED, describe(sql, first)
    row = job_row(sql, last)
    assert (row["state"], row["wait_key"], row["wake_sent_at"]) == (
        JobState.WAITING,
        "debounce",
        None,
    ), describe(sql, last)

    # Then a sweep sends its wake-up; a worker runs the last edit only, once.
    stack.worker(name="worker")
    await asyncio.to_thread(sweep_once, stack)
    row = await asyncio.to_thread(wait_for_state, sql, last, JobState.SUCCEEDED, timeout=60)
    assert row["result"] == {"document": "d", "indexed_revision": 2}
    assert (row["attempt"], row["runs"]) == (1, 1), describe(sql, last)
    gone = job_row(sql, first)
    assert (gone["state"], gone["runs"]) == (JobState.CANCELLED, 0), describe(sql, first)
    (ended,) = [e for e in timeline(sql, first) if e["to_state"] == JobState.CANCELLED]
    assert ended["detail"] == f"debounced: replaced by job {last}, a newer job of its key"
    check_invariants(sql, stack, [first, last])


@pytest.mark.asyncio
async def test_an_api_killed_after_cancelling_the_active_job_still_runs_the_new_one_alone(
    stack: Stack, sql: Any
) -> None:
    # Given a conversation's reply running on a worker (30 s), and an API armed at
    # after_active_cancelled.
    key = stack.key("acme")
    stack.worker(name="worker")
    url, api_proc = armed_api(stack, Point.AFTER_ACTIVE_CANCELLED)
    with api_client(url, key) as client:
        resp = client.post(
            "/v1/jobs",
            json={"kind": "demo.converse", "payload": {"conversation": "x", "seconds": 30}},
        )
        assert resp.status_code == 202, resp.text
        old = resp.json()["id"]
        await asyncio.to_thread(wait_for_state, sql, old, JobState.RUNNING, timeout=60)
        # When a newer message cancels it (if_active cancel_active): the API dies once the
        # new job and the cancel asked of the old committed, before the new one's message.
        body = {
            "kind": "demo.converse",
            "payload": {"conversation": "x", "text": "new", "seconds": 0},
            "if_active": "cancel_active",
        }
        post_dying(client, body)
    await asyncio.to_thread(died_by_sigkill, api_proc, "the API armed at after_active_cancelled")
    rows = sql.execute("SELECT * FROM jobs ORDER BY created_at").fetchall()
    assert len(rows) == 2, rows
    new = rows[1]["id"]
    assert rows[0]["cancel_requested"], describe(sql, old)
    assert unsent_rows(sql, new) == 1, "the new job's message was never sent"

    # Then the old one stops, cancelled (its worker was told); a sweep relays the new
    # one's message, and it runs once, after the old one ended.
    gone = await asyncio.to_thread(wait_for_state, sql, old, JobState.CANCELLED, timeout=60)
    await asyncio.to_thread(sweep_once, stack)
    row = await asyncio.to_thread(wait_for_state, sql, new, JobState.SUCCEEDED, timeout=60)
    assert row["result"]["text"] == "re: new"
    assert row["attempt"] == 1, describe(sql, new)
    assert gone["finished_at"] <= runs_of(sql, new)[0]["at"], "never both running"
    assert len(runs_of(sql, new)) == 1
    asked = [e["detail"] for e in timeline(sql, old) if (e["detail"] or "").startswith("cancel")]
    assert (
        f"cancel asked: cancelled: replaced by job {new} (its kind's if_active cancel_active)"
        in (asked)
    ), describe(sql, old)
    wait_for(lambda: unsent_rows(sql, new) == 0, timeout=30, what="the relayed row marked sent")
    check_invariants(sql, stack, [old, new])
