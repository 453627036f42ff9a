"""Flow control by key (issue 35): one run per conversation in order, the if_active
policies, a debounce, a rate per key, keys scoped to the tenant, and the tenant's running
cap exact under claims at the same moment. On every carrier the stack runs."""

from __future__ import annotations

import asyncio
import datetime as dt
import itertools
import uuid
from typing import Any

import psycopg
import pytest

from app import errors, store
from app.states import JobState
from app.store import leases
from tests.conftest import Stack, job_row
from tests.helpers import drain, engine_for, handle_and_ack, receive_records, submit

pytestmark = pytest.mark.integration


def states(sql: Any, ids: list[Any]) -> list[str]:
    return [job_row(sql, i)["state"] for i in ids]


def when(row: dict[str, Any], field: str) -> dt.datetime:
    return dt.datetime.fromisoformat(row["result"][field])


@pytest.mark.asyncio
async def test_three_messages_to_one_conversation_run_one_at_a_time_in_order(
    stack: Stack, sql: Any
) -> None:
    async with engine_for(stack.settings) as engine:
        ids = [
            await submit(engine, "demo.converse", {"conversation": "c-1", "text": f"m{i}"})
            for i in range(3)
        ]
        other = await submit(engine, "demo.converse", {"conversation": "c-2", "text": "x"})
        # The first batch holds all four deliveries: c-1's first and c-2's run, the
        # others wait parked behind their key, with no attempt used.
        records = await receive_records(engine, wait=1)
        for _ in range(5):
            if len(records) >= 4:
                break
            records += await receive_records(engine, wait=1)
        await handle_and_ack(engine, records)
        rows = {i: job_row(sql, i) for i in [*ids, other]}
        assert rows[ids[0]]["state"] == JobState.SUCCEEDED
        assert rows[other]["state"] == JobState.SUCCEEDED, "another key is not held by c-1"
        assert all(rows[i]["state"] == JobState.QUEUED for i in ids[1:])
        assert all(rows[i]["attempt"] == 0 for i in ids[1:]), "waiting its turn uses no attempt"
        await drain(engine, sql, ids, deadline=60)
    rows = [job_row(sql, i) for i in ids]
    assert [r["state"] for r in rows] == [JobState.SUCCEEDED] * 3
    assert [r["result"]["text"] for r in rows] == ["re: m0", "re: m1", "re: m2"]
    for before, after in itertools.pairwise(rows):
        assert when(before, "ended_at") <= when(after, "started_at"), (
            "a conversation's runs never overlap, and go in the order they came"
        )
    assert [r["flow_key"] for r in rows] == ["c-1"] * 3


@pytest.mark.asyncio
async def test_a_key_is_held_across_a_wait(stack: Stack, sql: Any) -> None:
    """A run waiting on a timer still holds its conversation: the next message waits."""
    async with engine_for(stack.settings) as engine:
        first = await submit(
            engine, "demo.converse", {"conversation": "w", "seconds": 0, "wait_seconds": 2}
        )
        second = await submit(engine, "demo.converse", {"conversation": "w", "seconds": 0})
        for _ in range(10):
            records = await receive_records(engine, wait=1)
            if records:
                await handle_and_ack(engine, records)
            if job_row(sql, first)["state"] == JobState.WAITING:
                break
        for _ in range(2):
            records = await receive_records(engine, wait=1)
            if records:
                await handle_and_ack(engine, records)
            assert job_row(sql, second)["state"] == JobState.QUEUED, (
                "the first holds its key while it waits"
            )
        await drain(engine, sql, [first, second], deadline=60)
    a, b = job_row(sql, first), job_row(sql, second)
    assert (a["state"], b["state"]) == (JobState.SUCCEEDED, JobState.SUCCEEDED)
    assert when(a, "ended_at") <= when(b, "started_at")


@pytest.mark.asyncio
async def test_keys_are_scoped_to_the_tenant(stack: Stack, sql: Any) -> None:
    async with engine_for(stack.settings) as engine:
        a = await submit(engine, "demo.converse", {"conversation": "c-1"}, tenant="acme")
        b = await submit(engine, "demo.converse", {"conversation": "c-1"}, tenant="beta")
        await drain(engine, sql, [a, b], deadline=30)
    rows = [job_row(sql, i) for i in (a, b)]
    assert [r["state"] for r in rows] == [JobState.SUCCEEDED] * 2
    assert [r["parked"] for r in rows] == [False, False]
    assert [r["attempt"] for r in rows] == [1, 1]


@pytest.mark.asyncio
async def test_if_active_reject_answers_409_naming_the_active_job_and_writes_nothing(
    stack: Stack, sql: Any
) -> None:
    async with engine_for(stack.settings) as engine:
        first = await submit(engine, "demo.converse", {"conversation": "r"})
        before = sql.execute("SELECT count(*) AS n FROM jobs").fetchone()["n"]
        with pytest.raises(errors.Conflict) as refused:
            await submit(engine, "demo.converse", {"conversation": "r"}, if_active="reject")
        assert str(first) in str(refused.value)
        assert sql.execute("SELECT count(*) AS n FROM jobs").fetchone()["n"] == before
        await drain(engine, sql, [first])
        # Ended: the key is free again.
        again = await submit(engine, "demo.converse", {"conversation": "r"}, if_active="reject")
        await drain(engine, sql, [again])
    assert states(sql, [first, again]) == [JobState.SUCCEEDED] * 2


@pytest.mark.asyncio
async def test_if_active_drop_new_answers_the_active_job(stack: Stack, sql: Any) -> None:
    from app.services import submit as service

    async with engine_for(stack.settings) as engine:
        first = await submit(engine, "demo.converse", {"conversation": "d"})
        before = sql.execute("SELECT count(*) AS n FROM jobs").fetchone()["n"]
        dropped = await service.submit(
            engine.settings,
            engine.db,
            engine.queue,
            kind="demo.converse",
            payload={"conversation": "d"},
            if_active="drop_new",
        )
        assert dropped.dropped and not dropped.created
        assert dropped.job["id"] == first
        assert sql.execute("SELECT count(*) AS n FROM jobs").fetchone()["n"] == before
        await drain(engine, sql, [first])


@pytest.mark.asyncio
async def test_if_active_cancel_active_cancels_the_queued_one_naming_the_new(
    stack: Stack, sql: Any
) -> None:
    async with engine_for(stack.settings) as engine:
        old = await submit(engine, "demo.converse", {"conversation": "x", "text": "old"})
        new = await submit(
            engine,
            "demo.converse",
            {"conversation": "x", "text": "new"},
            if_active="cancel_active",
        )
        await drain(engine, sql, [old, new])
    assert states(sql, [old, new]) == [JobState.CANCELLED, JobState.SUCCEEDED]
    detail = sql.execute(
        "SELECT detail FROM job_events WHERE job_id = %s AND to_state = 'cancelled'", (old,)
    ).fetchone()["detail"]
    assert f"replaced by job {new}" in detail


@pytest.mark.asyncio
async def test_a_debounce_of_2s_turns_ten_submissions_into_one_run(stack: Stack, sql: Any) -> None:
    async with engine_for(stack.settings) as engine:
        ids = [
            await submit(engine, "demo.reindex", {"document": "doc-1", "revision": i})
            for i in range(10)
        ]
        await drain(engine, sql, ids, deadline=60)
    rows = [job_row(sql, i) for i in ids]
    assert [r["state"] for r in rows] == [JobState.CANCELLED] * 9 + [JobState.SUCCEEDED]
    assert rows[-1]["result"] == {"document": "doc-1", "indexed_revision": 9}
    assert all(r["runs"] == 0 for r in rows[:-1]), "a replaced job never ran"
    for earlier in ids[:-1]:
        detail = sql.execute(
            "SELECT detail FROM job_events WHERE job_id = %s AND to_state = 'cancelled'",
            (earlier,),
        ).fetchone()["detail"]
        assert detail.startswith("debounced: replaced by job ")
    last_replaced = sql.execute(
        "SELECT detail FROM job_events WHERE job_id = %s AND to_state = 'cancelled'", (ids[-2],)
    ).fetchone()["detail"]
    assert str(ids[-1]) in last_replaced, "the reason names the job that replaced it"


@pytest.mark.asyncio
async def test_a_rate_per_key_spaces_the_starts(stack: Stack, sql: Any) -> None:
    """demo.sync: 2 starts a second per integration. Five at once start over >= 2 s."""
    async with engine_for(stack.settings) as engine:
        ids = [await submit(engine, "demo.sync", {"integration": "i-1", "n": i}) for i in range(5)]
        await drain(engine, sql, ids, deadline=60)
    rows = [job_row(sql, i) for i in ids]
    assert [r["state"] for r in rows] == [JobState.SUCCEEDED] * 5
    leases = sql.execute(
        "SELECT count(*) AS n FROM job_events WHERE job_id = ANY(%s::uuid[]) AND to_state = 'leased'",
        ([str(i) for i in ids],),
    ).fetchone()["n"]
    assert leases == 5, "each job was claimed once"
    # The claim's own time, as the limit counts it: taken once the claim holds its
    # tenant's turn. An event's time is taken later in the same statement, by an amount
    # that differs from claim to claim, so two events can be a few ms under the period.
    claims = sorted(r["key_claimed_at"] for r in rows)
    for i in range(len(claims) - 2):
        assert claims[i + 2] - claims[i] >= dt.timedelta(seconds=1), (
            "no three claims of the key within one second"
        )
    assert all(r["attempt"] == 1 for r in rows), "waiting for the rate uses no attempt"


@pytest.mark.asyncio
async def test_a_claim_that_waited_for_its_tenants_turn_is_timed_when_it_got_the_turn(
    stack: Stack, sql: Any
) -> None:
    """A claim waits for the claims of its tenant before it (lock_claim_tenants). The
    time its key's rate counts, and its lease's start, are when it got its turn, not
    when its transaction began: else a claim held up for 0.3 s counts as 0.3 s older
    than it is, and a third start can come within the period."""
    async with engine_for(stack.settings) as engine:
        job_id = await submit(engine, "demo.sync", {"integration": "i-9", "n": 0})
        tenant = job_row(sql, job_id)["tenant"]
        with psycopg.connect(sql.info.dsn) as holder:
            holder.execute(
                "SELECT pg_advisory_xact_lock(hashtextextended('tasklease.claim:' || %s, 0))",
                (tenant,),
            )
            token = uuid.uuid4()
            claim = asyncio.create_task(
                leases.claim_batch(
                    engine.db,
                    job_ids=[job_id],
                    tokens=[token],
                    generations=[None],
                    owner="w-late",
                    lease_seconds=60,
                    redrive=leases.RedriveBudget.of(engine.settings),
                    max_running=100,
                )
            )
            await asyncio.sleep(1.0)
            assert not claim.done(), "the claim waits for its tenant's turn"
            released = holder.execute("SELECT clock_timestamp() AS t").fetchone()[0]
        verdict = (await claim)[token]
    assert not verdict.deferred
    row = job_row(sql, job_id)
    assert row["key_claimed_at"] >= released, "the rate counts the claim from its turn"
    assert row["lease_expires_at"] >= released + dt.timedelta(seconds=60)


@pytest.mark.asyncio
async def test_the_tenant_running_cap_is_exact_under_claims_at_the_same_moment(
    stack: Stack, sql: Any
) -> None:
    """Two workers claim a cap-1 tenant's jobs at the same moment, many times: never two
    leases at once (each claim counts the one before it committed)."""
    async with engine_for(stack.settings) as one, engine_for(stack.settings) as two:
        await store.tenants.set_limits(one.db, "capped", max_running=1)
        for _ in range(8):
            ids = [await submit(one, "demo.noop", {}, tenant="capped") for _ in range(2)]
            budget = leases.RedriveBudget.of(one.settings)
            tokens = [uuid.uuid4() for _ in ids]
            claims = await asyncio.gather(
                *(
                    leases.claim_batch(
                        engine.db,
                        job_ids=[job_id],
                        tokens=[token],
                        generations=[None],
                        owner=f"w{n}",
                        lease_seconds=60,
                        redrive=budget,
                        max_running=100,
                    )
                    for n, (engine, job_id, token) in enumerate(
                        zip((one, two), ids, tokens, strict=True)
                    )
                )
            )
            claimed = [v for c in claims for v in c.values() if not v.deferred]
            assert len(claimed) == 1, "one lease at most for a tenant whose cap is 1"
            sql.execute(
                "UPDATE jobs SET state = 'succeeded', lease_token = NULL, finished_at = now() "
                "WHERE id = ANY(%s::uuid[])",
                ([str(i) for i in ids],),
            )


@pytest.mark.asyncio
async def test_a_debounce_waits_its_window_from_when_the_key_was_free(
    stack: Stack, sql: Any, database_url: str
) -> None:
    """A debounced submission that waited for its key's lock (another submission to the
    key held it) waits its whole window after it got the key: its timer was counted from
    the transaction's start, before that wait, and came due that much early."""
    from app.services import submit as service

    tenant, kind, key = service.DEFAULT_TENANT, "demo.reindex", "doc-lock"
    holder = await psycopg.AsyncConnection.connect(database_url)
    try:
        await holder.execute(
            "SELECT pg_advisory_xact_lock(hashtextextended('tasklease.key:' || %s, 0))",
            (f"{tenant}/{kind}/{key}",),
        )
        async with engine_for(stack.settings) as engine:
            submitting = asyncio.create_task(submit(engine, kind, {"document": key, "revision": 1}))
            await asyncio.sleep(1.0)
            assert not submitting.done(), "the submission did not wait for the key's lock"
            cur = await holder.execute("SELECT clock_timestamp()")
            freed = (await cur.fetchone())[0]
            await holder.commit()
            job_id = await submitting
    finally:
        await holder.close()
    row = job_row(sql, job_id)
    assert row["state"] == JobState.WAITING and row["wait_key"] == "debounce", row
    assert row["wake_at"] >= freed + dt.timedelta(seconds=2.0), (row["wake_at"], freed)


def test_a_job_behind_its_key_says_so_in_its_api_answer(api: Any) -> None:
    """GET /v1/jobs/{id} has a keyed job's key_status, as `tasklease jobs show` shows it:
    the second message to one conversation waits for its key; the first does not; a job
    with no key has none."""

    def post(kind: str, payload: dict[str, Any]) -> str:
        resp = api.post("/v1/jobs", json={"kind": kind, "payload": payload})
        assert resp.status_code == 202, resp.text
        return str(resp.json()["id"])

    first = post("demo.converse", {"conversation": "c-status", "text": "m0"})
    second = post("demo.converse", {"conversation": "c-status", "text": "m1"})
    plain = post("demo.noop", {})
    ahead = api.get(f"/v1/jobs/{first}").json()["key_status"]
    behind = api.get(f"/v1/jobs/{second}").json()["key_status"]
    assert ahead == {
        "key": "c-status",
        "concurrency": 1,
        "rate": None,
        "holding": 0,
        "queued_ahead": 0,
        "open": 2,
        "waits_for_key": False,
        "waits_for_rate": False,
    }
    assert behind == {**ahead, "queued_ahead": 1, "waits_for_key": True}
    assert api.get(f"/v1/jobs/{plain}").json()["key_status"] is None
