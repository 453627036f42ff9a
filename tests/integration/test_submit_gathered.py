"""Concurrent single submissions share one statement (app/services/gather.py), and each
still gets exactly the answer it would have had alone: its own job and message, a 429 at
the limit, a replay or a 409 for an Idempotency-Key, an error of its own making."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from app import errors, store
from app.services import submit as service
from tests.conftest import Stack
from tests.helpers import engine_for, queue_depth

pytestmark = [pytest.mark.integration, pytest.mark.carrier_neutral]

TRICKLE = 0.001  # a rate whose window outlasts the test


@pytest.fixture
def statements(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """How many jobs each insert_jobs statement wrote or was asked to write."""
    sizes: list[int] = []
    real = store.jobs.insert

    async def counted(db: Any, rows: Any, **kw: Any) -> Any:
        sizes.append(len(rows))
        return await real(db, rows, **kw)

    monkeypatch.setattr(store.jobs, "insert", counted)
    return sizes


async def submit_all(engine: Any, n: int, **kw: Any) -> list[Any]:
    """``n`` single submissions at once: each one's answer or the error it raised."""

    async def one(i: int) -> Any:
        return await service.submit(
            engine.settings, engine.db, engine.queue, kind="demo.noop", payload={"i": i}, **kw
        )

    return await asyncio.gather(*(one(i) for i in range(n)), return_exceptions=True)


@pytest.mark.asyncio
async def test_concurrent_submissions_share_statements_and_each_gets_its_own_job(
    stack: Stack, sql: Any, statements: list[int]
) -> None:
    async with engine_for(stack.settings) as engine:
        answers = await submit_all(engine, 30, tenant="acme")

    assert all(isinstance(a, service.Submitted) and a.created for a in answers), answers
    assert [a.job["payload"]["i"] for a in answers] == list(range(30))
    assert len({a.job["id"] for a in answers}) == 30
    # Fewer statements than requests, none larger than the requests it gathered.
    assert sum(statements) == 30 and len(statements) < 30 and max(statements) > 1
    rows = sql.execute("SELECT count(*) AS n FROM jobs WHERE tenant = 'acme'").fetchone()
    assert rows["n"] == 30
    assert queue_depth(stack) == 30  # every job's message sent once
    events = sql.execute("SELECT count(*) AS n FROM job_events").fetchone()
    assert events["n"] == 30


@pytest.mark.asyncio
async def test_at_the_burst_exactly_as_many_are_admitted_as_alone(
    stack: Stack, sql: Any, statements: list[int]
) -> None:
    settings = stack.with_settings(rate_limit_per_second=TRICKLE, rate_limit_burst=7)
    async with engine_for(settings) as engine:
        answers = await submit_all(engine, 20, tenant="acme")

    admitted = [a for a in answers if isinstance(a, service.Submitted)]
    refused = [a for a in answers if isinstance(a, errors.TooManyRequests)]
    assert len(admitted) == 7 and len(refused) == 13, answers
    assert all("rate limit" in str(e) for e in refused)
    rows = sql.execute("SELECT count(*) AS n FROM jobs").fetchone()
    assert rows["n"] == 7
    assert max(statements) > 1  # some were gathered, then refused whole and run alone


@pytest.mark.asyncio
async def test_one_idempotency_key_in_one_statement_is_one_job_and_a_replay(
    stack: Stack, sql: Any
) -> None:
    async with engine_for(stack.settings) as engine:

        async def same(body: dict[str, Any]) -> Any:
            return await service.submit(
                engine.settings,
                engine.db,
                engine.queue,
                kind="demo.noop",
                payload=body,
                idempotency_key="order-1",
                tenant="acme",
            )

        twins = await asyncio.gather(*(same({"n": 1}) for _ in range(6)))
        clash = await asyncio.gather(
            same({"n": 1}), same({"n": 2}), same({"n": 1}), return_exceptions=True
        )

    assert len({t.job["id"] for t in twins}) == 1
    assert sum(t.created for t in twins) == 1
    assert [type(c) for c in clash] == [service.Submitted, errors.Conflict, service.Submitted]
    rows = sql.execute("SELECT count(*) AS n FROM jobs").fetchone()
    assert rows["n"] == 1


@pytest.mark.asyncio
async def test_a_value_postgresql_refuses_fails_only_its_own_request(
    stack: Stack, sql: Any, statements: list[int]
) -> None:
    async with engine_for(stack.settings) as engine:

        async def one(payload: Any) -> Any:
            return await service.submit(
                engine.settings, engine.db, engine.queue, kind="demo.noop", payload=payload
            )

        answers = await asyncio.gather(
            *(one({"i": i}) for i in range(5)),
            one({"bad": "nul \u0000"}),
            *(one({"i": i}) for i in range(5, 10)),
            return_exceptions=True,
        )

    bad = answers[5]
    assert isinstance(bad, Exception) and not isinstance(bad, service.Submitted), bad
    assert isinstance(bad, errors.BadRequest)  # refused before any statement
    good = answers[:5] + answers[6:]
    assert all(isinstance(a, service.Submitted) for a in good), good
    rows = sql.execute("SELECT count(*) AS n FROM jobs").fetchone()
    assert rows["n"] == 10


@pytest.mark.asyncio
async def test_a_statement_failing_on_one_requests_value_fails_only_that_request(
    stack: Stack, sql: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given: a statement that fails whenever it carries one request's value (as
    # PostgreSQL does for a value it cannot store).
    real = store.jobs.insert
    sizes: list[int] = []

    async def refusing(db: Any, rows: Any, **kw: Any) -> Any:
        sizes.append(len(rows))
        if any(r.payload.get("poison") for r in rows):
            raise ValueError("PostgreSQL refused a value")
        return await real(db, rows, **kw)

    monkeypatch.setattr(store.jobs, "insert", refusing)
    async with engine_for(stack.settings) as engine:

        async def one(payload: Any) -> Any:
            return await service.submit(
                engine.settings, engine.db, engine.queue, kind="demo.noop", payload=payload
            )

        answers = await asyncio.gather(
            *(one({"i": i}) for i in range(8)),
            one({"poison": True}),
            *(one({"i": i}) for i in range(8, 16)),
            return_exceptions=True,
        )

    assert isinstance(answers[8], ValueError)
    good = answers[:8] + answers[9:]
    assert all(isinstance(a, service.Submitted) for a in good), good
    assert max(sizes) > 1  # it was gathered with others, and they were run again alone
    rows = sql.execute("SELECT count(*) AS n FROM jobs").fetchone()
    assert rows["n"] == 16
