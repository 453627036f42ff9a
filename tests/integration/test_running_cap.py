"""The per-tenant running cap (issue 16): the claim holds a tenant to N live leases in its
own statement, and a delivery over the cap goes back to the queue with no attempt used."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import httpx
import pytest

from app import store
from app.services import parking
from app.states import JobState
from app.store.jobs import Limits, NewRow
from app.worker import fairness
from tests.conftest import Stack, job_row, wait_for
from tests.helpers import engine_for, handle_and_ack, receive_records, submit

pytestmark = pytest.mark.integration

# A wide window on the queue: nothing here is parked (tests/integration/test_parking.py).
LIMITS = Limits(rate_per_second=1000.0, burst=1000, max_in_flight=1000, window_per_slot=100)
BUDGET = store.leases.RedriveBudget(budget=3, window_seconds=86_400)


async def _jobs(db: store.Database, tenant: str, n: int) -> list[uuid.UUID]:
    rows = [NewRow(uuid.uuid4(), "demo.noop", {}, 3, 60, None, "hash") for _ in range(n)]
    await store.jobs.insert(db, rows, tenant=tenant, limits=LIMITS, key_id=None)
    return sorted(r.id for r in rows)


async def _claim(
    db: store.Database, ids: list[uuid.UUID], *, max_running: int = 100
) -> dict[uuid.UUID, store.leases.Verdict]:
    tokens = [uuid.uuid4() for _ in ids]
    by_token = await store.leases.claim_batch(
        db,
        job_ids=ids,
        tokens=tokens,
        generations=[None] * len(ids),
        owner="w",
        lease_seconds=30,
        redrive=BUDGET,
        max_running=max_running,
    )
    return {by_token[t].job.id: by_token[t] for t in tokens if t in by_token}


@pytest.mark.asyncio
async def test_a_batch_claims_up_to_the_tenants_cap_and_parks_the_rest_using_no_attempt(
    database_url: str, sql: Any
) -> None:
    async with store.connect(database_url) as db:
        await store.tenants.set_limits(db, "acme", max_running=2)
        acme = await _jobs(db, "acme", 5)
        beta = await _jobs(db, "beta", 1)
        verdicts = await _claim(db, acme + beta, max_running=100)

    claimed = [i for i in acme if not verdicts[i].deferred]
    deferred = [i for i in acme if verdicts[i].deferred]
    assert claimed == acme[:2], "the first two by id order hold the tenant's two slots"
    assert deferred == acme[2:]
    assert not verdicts[beta[0]].deferred, "another tenant is not held by acme's cap"
    for i in deferred:
        # The backlog as the statement found it: all five were queued before it ran.
        assert verdicts[i].cap == 2 and verdicts[i].backlog == 5
        row = job_row(sql, i)
        assert (
            row["state"] == JobState.QUEUED and row["attempt"] == 0 and row["lease_token"] is None
        )
        assert row["parked"] and verdicts[i].parked_now, "parked until a lease's end"
        n = sql.execute("SELECT count(*) AS n FROM job_events WHERE job_id = %s", (i,)).fetchone()
        assert n["n"] == 1, "a deferred claim writes no event (parked is no new state)"


@pytest.mark.asyncio
async def test_the_default_cap_applies_and_a_slot_frees_when_a_job_ends_or_its_lease_expires(
    database_url: str, sql: Any
) -> None:
    async with store.connect(database_url) as db:
        first, second, third = await _jobs(db, "acme", 3)
        one = await _claim(db, [first], max_running=1)
        assert not one[first].deferred
        assert (await _claim(db, [second], max_running=1))[second].deferred

        # The holder's lease expires: it no longer counts (its worker is presumed dead).
        sql.execute(
            "UPDATE jobs SET lease_expires_at = now() - interval '1 second' WHERE id = %s",
            (first,),
        )
        assert not (await _claim(db, [second], max_running=1))[second].deferred
        assert (await _claim(db, [third], max_running=1))[third].deferred

        # The second ends: its slot is free again.
        token = job_row(sql, second)["lease_token"]
        assert await store.leases.finish(
            db, second, token, to_state=JobState.SUCCEEDED, from_state=JobState.LEASED
        )
        assert not (await _claim(db, [third], max_running=1))[third].deferred
    assert job_row(sql, third)["attempt"] == 1, "the deferred claims used no attempt"


def test_the_hand_back_grows_with_the_backlog_per_slot_and_is_capped(stack: Stack) -> None:
    s = stack.with_settings(running_cap_delay_seconds=2.0)
    for _ in range(50):
        alone = fairness.hand_back_delay(s, backlog=0, cap=10)
        assert 1.0 <= alone <= 2.0
        flood = fairness.hand_back_delay(s, backlog=5000, cap=10)
        assert 2.0 * fairness.MAX_DELAY_FACTOR * 0.5 <= flood <= 2.0 * fairness.MAX_DELAY_FACTOR
        some = fairness.hand_back_delay(s, backlog=40, cap=10)
        assert 4.0 <= some <= 8.0


@pytest.mark.asyncio
async def test_a_deferred_delivery_goes_back_to_the_queue_and_runs_once_a_slot_frees(
    stack: Stack, sql: Any
) -> None:
    settings = stack.with_settings(max_running_per_tenant=1, running_cap_delay_seconds=1.0)
    async with engine_for(settings) as engine:
        a = await submit(engine, "demo.noop", {}, tenant="acme")
        b = await submit(engine, "demo.noop", {}, tenant="acme")
        # a is leased by hand (its worker still at it): b's delivery finds the cap full.
        held = await _claim(engine.db, [uuid.UUID(str(a))], max_running=1)
        assert not held[uuid.UUID(str(a))].deferred
        records = [r for r in await receive_records(engine) if str(b) in r["body"]]
        assert records, "b's message was received"
        response = await engine.handle({"Records": records}, None)
        assert response["batchItemFailures"] == [{"itemIdentifier": records[0]["messageId"]}]
        assert job_row(sql, b)["state"] == JobState.QUEUED
        assert job_row(sql, b)["attempt"] == 0

        assert job_row(sql, b)["parked"], "b waits parked for a slot"

        # a finishes (by hand: no engine releases for it); a release sends b, which runs
        # on its first attempt.
        token = job_row(sql, a)["lease_token"]
        await store.leases.finish(engine.db, uuid.UUID(str(a)), token, to_state=JobState.SUCCEEDED)
        assert await parking.release_all(engine.settings, engine.db, engine.queue) == 1

        async def run_until_done() -> None:
            while job_row(sql, b)["state"] != JobState.SUCCEEDED:
                mine = [r for r in await receive_records(engine, wait=1) if str(b) in r["body"]]
                if mine:
                    await handle_and_ack(engine, mine)

        await asyncio.wait_for(run_until_done(), timeout=15)
    assert job_row(sql, b)["attempt"] == 1


@pytest.mark.asyncio
async def test_a_message_near_max_receive_count_is_replaced_by_a_fresh_one(
    stack: Stack, sql: Any
) -> None:
    settings = stack.with_settings(
        max_running_per_tenant=1, max_receive_count=20, running_cap_delay_seconds=0.1
    )
    async with engine_for(settings) as engine:
        a = await submit(engine, "demo.noop", {}, tenant="acme")
        b = await submit(engine, "demo.noop", {}, tenant="acme")
        await _claim(engine.db, [uuid.UUID(str(a))], max_running=1)
        records = [r for r in await receive_records(engine) if str(b) in r["body"]]
        record = {**records[0], "attributes": {**records[0]["attributes"]}}
        record["attributes"]["ApproximateReceiveCount"] = "18"
        response = await engine.handle({"Records": [record]}, None)
        assert response["batchItemFailures"] == [], "the old message is to be deleted"
        await engine.queue.delete_batch([record["receiptHandle"]])

        # A fresh message for b comes (after its delay), received for the first time.
        async def fresh() -> dict[str, Any]:
            while True:
                for r in await receive_records(engine, wait=1):
                    if str(b) in r["body"]:
                        return r

        again = await asyncio.wait_for(fresh(), timeout=10)
    assert again["messageId"] != record["messageId"]
    assert fairness.receive_count(again) == 1
    assert job_row(sql, b)["attempt"] == 0


def test_workers_hold_a_tenant_to_its_cap_while_another_tenant_runs(stack: Stack, sql: Any) -> None:
    """Two worker processes, a cap of 2 for acme: acme's jobs never hold more than two live
    leases at once (read from the timeline), every job runs once, beta is not held back."""
    run(_set_cap(stack.settings.database_url, "acme", 2))
    api = stack.api()
    key_a, key_b = stack.key("acme"), stack.key("beta")
    with httpx.Client(base_url=api, timeout=10) as http:
        ids = [
            http.post(
                "/v1/jobs",
                json={"kind": "demo.sleep", "payload": {"seconds": 0.3}},
                headers={"Authorization": f"Bearer {key_a}"},
            ).json()["id"]
            for _ in range(6)
        ]
        beta = http.post(
            "/v1/jobs",
            json={"kind": "demo.sleep", "payload": {"seconds": 0.3}},
            headers={"Authorization": f"Bearer {key_b}"},
        ).json()["id"]
    env = {"TASKLEASE_RUNNING_CAP_DELAY_SECONDS": "0.5"}
    stack.worker(concurrency=4, env=env)
    stack.worker(concurrency=4, env=env)
    everyone = [*ids, beta]
    wait_for(
        lambda: (
            sql.execute(
                "SELECT count(*) AS n FROM jobs WHERE id = ANY(%s::uuid[]) AND state = 'succeeded'",
                (everyone,),
            ).fetchone()["n"]
            == len(everyone)
        ),
        timeout=40,
        what="every job to succeed",
    )
    rows = sql.execute(
        "SELECT job_id, to_state, at FROM job_events WHERE job_id = ANY(%s::uuid[])"
        " AND to_state IN ('leased', 'succeeded') ORDER BY at, id",
        (ids,),
    ).fetchall()
    live, most = 0, 0
    for r in rows:
        live += 1 if r["to_state"] == "leased" else -1
        most = max(most, live)
    assert most <= 2, f"acme held {most} leases at once over its cap of 2"
    attempts = sql.execute(
        "SELECT max(attempt) AS a FROM jobs WHERE id = ANY(%s::uuid[])", (everyone,)
    ).fetchone()
    assert attempts["a"] == 1, "deferred deliveries used no attempt"


async def _set_cap(url: str | None, tenant: str, cap: int) -> None:
    assert url is not None
    async with store.connect(url) as db:
        await store.tenants.set_limits(db, tenant, max_running=cap)


def run(coro: Any) -> Any:
    return asyncio.run(coro)
