"""The store's functions against real PostgreSQL: what the services, the engine, job
kinds (effects) and the CLI (tenant limits) call."""

from __future__ import annotations

import uuid

import pytest

from app import store
from app.states import JobState
from app.store.jobs import Limits, NewRow

pytestmark = pytest.mark.integration

LIMITS = Limits(rate_per_second=100.0, burst=100, max_in_flight=100)


async def running_job(db: store.Database) -> tuple[uuid.UUID, uuid.UUID]:
    """A job written, claimed and started by hand: (its id, its lease token)."""
    row = NewRow(uuid.uuid4(), "demo.noop", {}, 3, 60, None, "hash")
    written = await store.jobs.insert(db, [row], tenant="acme", limits=LIMITS, key_id=None)
    assert written.admission.rate_ok and [j.id for j in written.jobs] == [row.id]
    token = uuid.uuid4()
    claimed = await store.leases.claim_batch(
        db,
        job_ids=[row.id],
        tokens=[token],
        generations=[None],
        owner="w",
        lease_seconds=30,
        redrive=store.leases.RedriveBudget(budget=3, window_seconds=86_400),
        max_running=100,
    )
    assert claimed[token].job.state is JobState.LEASED and not claimed[token].refused
    started = await store.leases.start_batch(db, [(row.id, token, "7")])
    assert started == {token: store.leases.Started("7", [])}
    return row.id, token


@pytest.mark.asyncio
async def test_connect_opens_a_pool_for_the_block_and_closes_it_after_a_failure(
    database_url: str,
) -> None:
    opened: list[store.Database] = []

    async def fail_inside() -> None:
        async with store.connect(database_url, max_size=1) as db:
            await db.ping()
            opened.append(db)
            raise RuntimeError("inside")

    with pytest.raises(RuntimeError, match="inside"):
        await fail_inside()
    assert [db.pool.closed for db in opened] == [True]


@pytest.mark.asyncio
async def test_an_effect_is_recorded_once_and_only_by_the_lease_holder(database_url: str) -> None:
    async with store.connect(database_url, max_size=2) as db:
        job_id, token = await running_job(db)
        first = await store.effects.record(
            db, job_id=job_id, token=token, key="charge", seq=0, result={"id": 1}
        )
        again = await store.effects.record(
            db, job_id=job_id, token=token, key="charge", seq=1, result={"id": 2}
        )
        stranger = await store.effects.record(
            db, job_id=job_id, token=uuid.uuid4(), key="mail", seq=1, result=True
        )
        found = await store.effects.get(db, job_id, "charge")
        missing = await store.effects.get(db, job_id, "mail")
        restarted = await store.leases.start_batch(db, [(job_id, token, "1")])
    assert first is not None
    assert (first.key, first.seq, first.result) == ("charge", 0, {"id": 1})
    assert again is None  # refused: the first record wins
    assert stranger is None  # refused: not the lease holder
    assert found is not None
    assert (found.key, found.seq, found.result, found.attempt) == ("charge", 0, {"id": 1}, 1)
    assert missing is None
    assert restarted == {}  # running already: a second start is no one's


@pytest.mark.asyncio
async def test_tenant_limits_change_only_what_is_given_and_clear_once(database_url: str) -> None:
    async with store.connect(database_url, max_size=1) as db:
        await running_job(db)  # one unfinished job of acme's
        await store.tenants.set_limits(db, "acme", rate_per_second=2.5, burst=5)
        both = await store.tenants.set_limits(db, "acme", max_in_flight=7)
        listed = await store.tenants.list_limits(db)
        cleared = [await store.tenants.clear_limits(db, "acme") for _ in "12"]
    assert (both.tenant, both.rate_per_second, both.burst, both.max_in_flight) == (
        "acme",
        2.5,
        5,
        7,
    )
    assert [(t.tenant, t.max_in_flight, t.in_flight) for t in listed] == [("acme", 7, 1)]
    assert cleared == [True, False]
