"""A bulk cancel whose API process is SIGKILLed right after a batch committed
(after_bulk_batch): that batch's jobs are cancelled and the operation's cursor and counts
are past them, nothing else moved; the sweeper takes the operation over once its lease
expired and finishes it from the cursor. Every matching job is cancelled exactly once
(one event each), the counts are right, and the maintained counts by state match a scan.
A bulk re-run killed after a batch made its re-runs, before its cursor moved
(after_bulk_reruns), is run again from the same cursor and re-runs each job once."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

import httpx
import pytest

from app.crashpoints import Point
from tests.conftest import Stack, api_client
from tests.e2e.test_crash_points import died_by_sigkill
from tests.helpers import crash_env
from tests.retention_data import counts_by_scan, counts_maintained

pytestmark = [pytest.mark.e2e, pytest.mark.carrier_neutral]

BATCH = 3
JOBS = 7  # batches of 3, 3 and 1
ENV = {"TASKLEASE_BULK_BATCH_SIZE": str(BATCH), "TASKLEASE_BULK_LEASE_SECONDS": "1"}


def cancelled_events(sql: Any, ids: list[str]) -> dict[str, int]:
    rows = sql.execute(
        "SELECT job_id::text AS id, count(*) AS n FROM job_events "
        "WHERE to_state = 'cancelled' AND job_id = ANY(%s::uuid[]) GROUP BY job_id",
        (ids,),
    ).fetchall()
    return {r["id"]: r["n"] for r in rows}


@pytest.mark.asyncio
async def test_a_bulk_cancel_killed_after_a_batch_is_resumed_and_cancels_each_job_once(
    stack: Stack, sql: Any
) -> None:
    # Given: seven queued jobs of a kind (no worker runs), one of another kind, and an
    # API process armed to die after a bulk batch commits.
    key = stack.key("acme")
    stack.env.update(ENV | crash_env(Point.AFTER_BULK_BATCH))
    url = stack.api()
    api_proc = stack.procs[-1]
    for var in crash_env(Point.AFTER_BULK_BATCH):
        del stack.env[var]
    with api_client(url, key) as client:
        made = [
            client.post("/v1/jobs", json={"kind": "demo.noop", "payload": {"i": i}}).json()["id"]
            for i in range(JOBS)
        ]
        other = client.post("/v1/jobs", json={"kind": "demo.sleep", "payload": {}}).json()["id"]

        # When: a bulk cancel of the kind starts; the API dies after its first batch.
        body = {"action": "cancel", "filter": {"kind": "demo.noop"}}
        # Killed before it answered, maybe: the operation is in the database either way.
        with contextlib.suppress(httpx.TransportError):
            client.post("/v1/bulk", json=body)
    await asyncio.to_thread(died_by_sigkill, api_proc, "the API armed at after_bulk_batch")

    # Then: one batch whole (the three lowest ids), the cursor and counts past it.
    (op,) = sql.execute("SELECT * FROM bulk_operations").fetchall()
    first = sorted(made)[:BATCH]
    assert (op["state"], op["total"], op["done"], op["batches"]) == ("running", JOBS, BATCH, 1)
    assert str(op["cursor"]) == first[-1]
    assert set(cancelled_events(sql, made)) == set(first)
    assert counts_maintained(sql) == counts_by_scan(sql)

    # When: the sweeper runs after the dead runner's lease expired.
    await asyncio.sleep(1.5)
    sweeper = stack.spawn("sweep", "--once", env=ENV, name="sweep")
    assert await asyncio.to_thread(sweeper.wait, 60) == 0, sweeper.log_path.read_text()

    # Then: every job of the kind cancelled exactly once, the other kind untouched.
    op = sql.execute("SELECT * FROM bulk_operations WHERE id = %s", (op["id"],)).fetchone()
    assert (op["state"], op["done"], op["skipped"], op["failed"]) == ("done", JOBS, 0, 0)
    assert op["batches"] == 3
    assert cancelled_events(sql, made) == dict.fromkeys(made, 1)
    states = sql.execute(
        "SELECT id::text AS id, state::text AS state FROM jobs WHERE id = ANY(%s::uuid[])",
        ([*made, other],),
    ).fetchall()
    assert {r["id"]: r["state"] for r in states} == {
        **dict.fromkeys(made, "cancelled"),
        other: "queued",
    }
    assert counts_maintained(sql) == counts_by_scan(sql)


def reruns_of(sql: Any, ids: list[str]) -> dict[str, int]:
    rows = sql.execute(
        "SELECT rerun_of::text AS id, count(*) AS n FROM jobs "
        "WHERE rerun_of = ANY(%s::uuid[]) GROUP BY rerun_of",
        (ids,),
    ).fetchall()
    return {r["id"]: r["n"] for r in rows}


@pytest.mark.asyncio
async def test_a_bulk_rerun_killed_after_its_reruns_is_resumed_and_reruns_each_job_once(
    stack: Stack, sql: Any
) -> None:
    # Given: seven cancelled jobs of a kind (finished: a re-run acts on them), and an API
    # process armed to die once a bulk batch made its re-runs, before its cursor moved.
    key = stack.key("acme")
    stack.env.update(ENV | crash_env(Point.AFTER_BULK_RERUNS))
    url = stack.api()
    api_proc = stack.procs[-1]
    for var in crash_env(Point.AFTER_BULK_RERUNS):
        del stack.env[var]
    with api_client(url, key) as client:
        made = [
            client.post("/v1/jobs", json={"kind": "demo.noop", "payload": {"i": i}}).json()["id"]
            for i in range(JOBS)
        ]
        for job_id in made:
            assert client.post(f"/v1/jobs/{job_id}/cancel").status_code == 200
        assert client.get(f"/v1/jobs/{made[-1]}").json()["state"] == "cancelled"

        # When: a bulk re-run of the kind starts; the API dies after its first re-runs.
        with contextlib.suppress(httpx.TransportError):
            client.post("/v1/bulk", json={"action": "rerun", "filter": {"kind": "demo.noop"}})
    await asyncio.to_thread(died_by_sigkill, api_proc, "the API armed at after_bulk_reruns")

    # Then: the first batch's three jobs have their re-runs; the cursor did not move.
    (op,) = sql.execute("SELECT * FROM bulk_operations").fetchall()
    first = sorted(made)[:BATCH]
    assert (op["state"], op["total"], op["done"], op["batches"]) == ("running", JOBS, 0, 0)
    assert op["cursor"] is None
    assert reruns_of(sql, made) == dict.fromkeys(first, 1)

    # When: the sweeper takes the operation over once the dead runner's lease expired,
    # and runs that batch again.
    await asyncio.sleep(1.5)
    sweeper = stack.spawn("sweep", "--once", env=ENV, name="sweep")
    assert await asyncio.to_thread(sweeper.wait, 60) == 0, sweeper.log_path.read_text()

    # Then: every job re-run exactly once (the batch run twice found its re-runs by their
    # keys), the counts right, and the maintained counts by state match a scan.
    op = sql.execute("SELECT * FROM bulk_operations WHERE id = %s", (op["id"],)).fetchone()
    assert (op["state"], op["done"], op["skipped"], op["failed"]) == ("done", JOBS, 0, 0)
    assert reruns_of(sql, made) == dict.fromkeys(made, 1)
    assert counts_maintained(sql) == counts_by_scan(sql)
