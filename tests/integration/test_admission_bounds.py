"""The admission's counts bounded by a process's last ones (store/admission.py): a
submission soon after a full count reads only the tenant's jobs made since, and still
refuses exactly what the full count refuses, whoever made the jobs in between."""

from __future__ import annotations

import uuid

import psycopg
import pytest

from app import store
from app.store.jobs import Insertion, Limits, NewRow

pytestmark = pytest.mark.integration

TRICKLE = 0.001  # a rate whose window (burst / rate) outlasts the test


def row() -> NewRow:
    return NewRow(uuid.uuid4(), "demo.noop", {}, 3, 60, None, "hash")


async def submit(db: store.Database, limits: Limits, n: int = 1) -> Insertion:
    return await store.jobs.insert(
        db, [row() for _ in range(n)], tenant="acme", limits=limits, key_id=None
    )


def bounded(written: Insertion) -> bool:
    """It admitted on the last counts' bound, without counting in full."""
    return written.admission.counted_recent is None


@pytest.mark.asyncio
async def test_the_rate_limit_holds_across_processes_when_counts_are_bounded(
    database_url: str,
) -> None:
    limits = Limits(rate_per_second=TRICKLE, burst=5, max_in_flight=1000)
    async with (
        store.connect(database_url, max_size=2) as here,
        store.connect(database_url, max_size=2) as there,
    ):
        first = await submit(here, limits)
        assert first.jobs and not bounded(first)  # counted in full: 0 in the window
        second = await submit(here, limits)
        # 0 counted + 1 made since + 1 wanted <= 5: admitted on the bound alone.
        assert second.jobs and bounded(second)

        # Another process fills the window: 2 + 3 = 5.
        assert len((await submit(there, limits, 3)).jobs) == 3

        # This process's bound (0 + 5 + 1 > 5) no longer admits: it counts, and refuses.
        refused = await submit(here, limits)
        assert not refused.admission.rate_ok and not refused.jobs
        assert refused.admission.counted_recent == 5


@pytest.mark.asyncio
async def test_the_in_flight_cap_holds_when_counts_are_bounded(
    database_url: str, sql: psycopg.Connection[object]
) -> None:
    limits = Limits(rate_per_second=1000.0, burst=1000, max_in_flight=4)
    async with store.connect(database_url, max_size=2) as db:
        assert not bounded(await submit(db, limits))
        assert bounded(await submit(db, limits))
        # Jobs the bound must see though no submission made them here: written with a
        # creation time a little before the last full count (a submission that began
        # before it and committed after it).
        sql.execute(
            "INSERT INTO jobs (id, tenant, kind, payload, max_attempts, timeout_seconds,"
            " state, request_hash, created_at)"
            " SELECT gen_random_uuid(), 'acme', 'demo.noop', '{}', 3, 60, 'queued', 'h',"
            " now() - interval '200 milliseconds' FROM generate_series(1, 2)"
        )
        refused = await submit(db, limits)
        assert not refused.admission.flight_ok and not refused.jobs
        assert refused.admission.counted_flight == 4


@pytest.mark.asyncio
async def test_a_limit_lowered_applies_to_the_next_submission(database_url: str) -> None:
    async with store.connect(database_url, max_size=2) as db:
        wide = Limits(rate_per_second=TRICKLE, burst=100, max_in_flight=100)
        assert (await submit(db, wide, 3)).jobs
        assert bounded(await submit(db, wide))
        # The bound is of counts, not of limits: a tenant's limit cut to 4 refuses now.
        narrow = Limits(rate_per_second=TRICKLE, burst=4, max_in_flight=100)
        refused = await submit(db, narrow)
        assert not refused.admission.rate_ok and refused.admission.counted_recent == 4
