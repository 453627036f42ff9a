"""The shared model budget's reservation against real PostgreSQL: one conditional upsert
per call, so callers racing from several connection pools (as several workers and Lambdas
do) never take more than the budget of a minute; settling replaces the estimate."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import pytest

from app import store
from app.kinds.generate import Usage
from app.services import budgets
from app.store.model_limits import Reservation

pytestmark = pytest.mark.integration

MODEL = "openai/gpt-4o-mini"


@asynccontextmanager
async def pools(url: str, n: int) -> AsyncIterator[list[store.Database]]:
    """``n`` pools of their own: the connections of as many worker processes."""
    dbs = [store.Database(url, min_size=4, max_size=4) for _ in range(n)]
    for db in dbs:
        await db.open()
    try:
        yield dbs
    finally:
        for db in dbs:
            await db.close()


async def race(dbs: list[store.Database], calls: int, **budget: Any) -> list[Reservation]:
    """``calls`` reservations at once, spread over the pools."""
    start = asyncio.Event()

    async def one(i: int) -> Reservation:
        await start.wait()
        return await store.model_limits.reserve_model(dbs[i % len(dbs)], MODEL, **budget)

    tasks = [asyncio.create_task(one(i)) for i in range(calls)]
    await asyncio.sleep(0.05)
    start.set()
    return await asyncio.gather(*tasks)


def minutes(sql: Any) -> list[dict[str, Any]]:
    return sql.execute(
        "SELECT minute, requests, tokens FROM model_budget_minutes WHERE model = %s", (MODEL,)
    ).fetchall()


@pytest.mark.asyncio
@pytest.mark.parametrize(
    ("rpm", "tpm", "per_minute"), [(7, None, 7), (100, 1000, 6)], ids=["requests", "tokens"]
)
async def test_racing_callers_never_take_more_than_the_budget_of_a_minute(
    database_url: str, sql: Any, rpm: int, tpm: int | None, per_minute: int
) -> None:
    # Given a budget of 7 requests (or 1000 tokens: 6 calls of 150) a minute, and 40
    # calls from three pools released at once.
    async with pools(database_url, 3) as dbs:
        got = await race(dbs, 40, tokens=150, rpm=rpm, tpm=tpm)
    reserved = [r for r in got if r.minute is not None]
    rows = minutes(sql)
    # Then no minute holds more than the budget, the table accounts for every
    # reservation, and the budget was used (a race that crossed a minute uses two).
    assert all(r["requests"] <= rpm for r in rows), rows
    assert all(tpm is None or r["tokens"] <= tpm for r in rows), rows
    assert len(reserved) == sum(r["requests"] for r in rows)
    assert per_minute <= len(reserved) <= per_minute * len(rows)
    if len(rows) == 1:
        assert len(reserved) == per_minute
    # The refused ones know how long to wait: until the next minute at most.
    assert all(0 <= r.wait <= 60 for r in got if r.minute is None)


@pytest.mark.asyncio
async def test_settling_replaces_the_estimate_with_the_reported_usage(
    database_url: str, sql: Any
) -> None:
    async with pools(database_url, 1) as (db,):
        got = await store.model_limits.reserve_model(db, MODEL, tokens=300, rpm=10, tpm=10_000)
        assert got.minute is not None
        held = budgets.Held(300, MODEL, got.minute)
        assert [r["tokens"] for r in minutes(sql)] == [300]
        await budgets.settle(db, held, Usage("gpt-4o-mini", 120, 80))
        assert [r["tokens"] for r in minutes(sql)] == [200]
        # A usage the provider did not report keeps the estimate; a call that used
        # nothing (throttled) gives its tokens back; never below zero.
        await budgets.settle(db, budgets.Held(200, MODEL, got.minute), Usage("gpt-4o-mini"))
        assert [r["tokens"] for r in minutes(sql)] == [200]
        await budgets.settle(db, budgets.Held(500, MODEL, got.minute), None)
        assert [(r["requests"], r["tokens"]) for r in minutes(sql)] == [(1, 0)]
