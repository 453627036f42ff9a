"""Model providers' limits through the engine, against real PostgreSQL and moto's SQS
server: a throttle uses no attempt and waits the provider's delay; the throttle cap ends
the job; a call over a model budget or a tenant's day waits (or fails) using no attempt."""

from __future__ import annotations

import time
from typing import Any

import pytest
from prometheus_client import REGISTRY

from app.services import redrive
from app.states import JobState
from tests.conftest import Stack, job_row
from tests.helpers import engine_for, handle_and_ack, receive_records, submit
from tests.invariants import timeline

pytestmark = pytest.mark.integration

TICKET = {"ticket_id": "T-1", "subject": "Refund please", "body": "I was charged twice."}
BUDGET = "fake/fake-triage-1"


def throttles_counted() -> float:
    return (
        REGISTRY.get_sample_value(
            "tasklease_model_throttles_total", {"provider": "fake", "model": "fake-triage-1"}
        )
        or 0.0
    )


def budget_waits(budget: str) -> float:
    return (
        REGISTRY.get_sample_value("tasklease_model_budget_waits_total", {"budget": budget}) or 0.0
    )


@pytest.mark.asyncio
async def test_a_throttle_uses_no_attempt_and_waits_the_providers_delay(
    stack: Stack, sql: Any
) -> None:
    # Given a provider that throttles the first call with Retry-After: 2.
    settings = stack.with_settings(fake_model_retry_after_seconds=2)
    before = throttles_counted()
    ticket = {**TICKET, "subject": "[throttle:1] Refund please"}
    async with engine_for(settings) as engine:
        job_id = await submit(engine, "support.triage", ticket)
        # When the worker runs it: the job is retrying, its attempt given back.
        await handle_and_ack(engine, await receive_records(engine))
        throttled_at = time.monotonic()
        row = job_row(sql, job_id)
        assert (row["state"], row["attempt"], row["throttles"]) == (JobState.RETRYING, 0, 1)
        event = timeline(sql, job_id)[-1]
        assert event["to_state"] == JobState.RETRYING
        assert event["detail"].startswith("throttled by fake (fake-triage-1): 429, retry in 2.0 s")
        assert "no attempt used" in event["detail"]
        assert throttles_counted() == before + 1
        # Then the message stays hidden for the provider's delay, and the job succeeds
        # with its first attempt.
        records: list[dict[str, Any]] = []
        while not records and time.monotonic() - throttled_at < 10:
            records = await receive_records(engine, wait=1)
        assert records, "the throttled job's message never came back"
        assert time.monotonic() - throttled_at >= 1.5
        await handle_and_ack(engine, records)
    row = job_row(sql, job_id)
    assert (row["state"], row["attempt"]) == (JobState.SUCCEEDED, 1)
    assert [c["outcome"] for c in stack.model_calls()] == ["throttled", "ok"]


@pytest.mark.asyncio
async def test_the_throttle_cap_dead_letters_a_job_its_provider_always_throttles(
    stack: Stack, sql: Any
) -> None:
    # Given a provider that always throttles (no Retry-After: the default delay, short).
    settings = stack.with_settings(
        fake_model_retry_after_seconds=0, throttle_delay_seconds=0.2, max_throttles=2
    )
    ticket = {**TICKET, "subject": "[throttle] Refund please"}
    async with engine_for(settings) as engine:
        job_id = await submit(engine, "support.triage", ticket)
        deadline = time.monotonic() + 20
        while job_row(sql, job_id)["state"] != JobState.DEAD_LETTERED:
            assert time.monotonic() < deadline, timeline(sql, job_id)
            records = await receive_records(engine, wait=1)
            if records:
                await handle_and_ack(engine, records)
    row = job_row(sql, job_id)
    # Then it ends visibly: dead-lettered after the cap, naming the throttling; the
    # throttles used no attempt (max_attempts is 5: attempts would not have ended it).
    assert row["throttles"] == 2
    assert row["attempt"] == 1
    assert "throttled too often: 2 throttles" in row["last_error"]
    assert "TASKLEASE_MAX_THROTTLES=2" in row["last_error"]
    assert "fake (fake-triage-1): 429" in row["last_error"]
    assert [c["outcome"] for c in stack.model_calls()] == ["throttled"] * 3

    # A redrive gives the job its throttles back, as it gives back its attempts.
    async with engine_for(settings) as engine:
        await redrive.redrive_job(settings, engine.db, engine.queue, job_id, scope=None)
    row = job_row(sql, job_id)
    assert (row["state"], row["attempt"], row["throttles"]) == (JobState.QUEUED, 0, 0)


@pytest.mark.asyncio
async def test_a_streamed_call_throttled_before_its_first_piece_uses_no_attempt(
    stack: Stack, sql: Any
) -> None:
    settings = stack.with_settings(fake_model_throttle_rate=1.0)
    async with engine_for(settings) as engine:
        job_id = await submit(engine, "demo.write", {"prompt": "Explain leases", "words": 5})
        await handle_and_ack(engine, await receive_records(engine))
    row = job_row(sql, job_id)
    assert (row["state"], row["attempt"], row["throttles"]) == (JobState.RETRYING, 0, 1)
    assert timeline(sql, job_id)[-1]["detail"].startswith("throttled by fake (fake-writer-1): 429")
    assert sql.execute("SELECT count(*) AS n FROM job_output").fetchone()["n"] == 0


def fill_model_minutes(sql: Any, model: str, requests: int) -> None:
    """This minute's and the next one's budget already used (a test that crosses a
    minute still finds it used)."""
    sql.execute(
        "INSERT INTO model_budget_minutes (model, minute, requests, tokens) "
        "SELECT %s, date_trunc('minute', now()) + make_interval(mins => m), %s, 0 "
        "FROM generate_series(0, 1) AS m",
        (model, requests),
    )


@pytest.mark.asyncio
async def test_a_call_over_the_model_budget_is_handed_back_without_an_attempt(
    stack: Stack, sql: Any
) -> None:
    settings = stack.with_settings(model_budgets={BUDGET: {"rpm": 3}})
    fill_model_minutes(sql, BUDGET, 3)
    before = budget_waits("model")
    async with engine_for(settings) as engine:
        job_id = await submit(engine, "support.triage", TICKET)
        await handle_and_ack(engine, await receive_records(engine))
        # The message waits for the next minute: not back at once. (A short poll: a job
        # handled in a minute's last second is hidden for the 1 s floor only, which a
        # 1 s long poll would outlast.)
        assert await receive_records(engine, wait=0) == []
    row = job_row(sql, job_id)
    assert (row["state"], row["attempt"]) == (JobState.QUEUED, 0)
    detail = timeline(sql, job_id)[-1]["detail"]
    assert detail.startswith("waiting for a budget: model budget of fake/fake-triage-1 (3 rpm")
    assert "no attempt used" in detail
    assert stack.model_calls() == []  # the provider was never asked
    assert budget_waits("model") == before + 1


@pytest.mark.asyncio
async def test_a_budgeted_call_reserves_then_settles_with_the_reported_usage(
    stack: Stack, sql: Any
) -> None:
    settings = stack.with_settings(model_budgets={BUDGET: {"rpm": 100, "tpm": 100_000}})
    async with engine_for(settings) as engine:
        job_id = await submit(engine, "support.triage", TICKET)
        await handle_and_ack(engine, await receive_records(engine))
    assert job_row(sql, job_id)["state"] == JobState.SUCCEEDED
    used = sql.execute(
        "SELECT input_tokens + output_tokens AS n FROM effects WHERE job_id = %s AND key = 'triage'",
        (job_id,),
    ).fetchone()["n"]
    rows = sql.execute(
        "SELECT requests, tokens FROM model_budget_minutes WHERE model = %s", (BUDGET,)
    ).fetchall()
    # One request; the estimate (256 and more) replaced by the tokens the fake reported.
    assert [(r["requests"], r["tokens"]) for r in rows] == [(1, used)]
    assert 0 < used < 256


@pytest.mark.asyncio
async def test_without_budgets_nothing_is_reserved(stack: Stack, sql: Any) -> None:
    async with engine_for(stack.settings) as engine:
        job_id = await submit(engine, "support.triage", TICKET)
        await handle_and_ack(engine, await receive_records(engine))
    assert job_row(sql, job_id)["state"] == JobState.SUCCEEDED
    assert sql.execute("SELECT count(*) AS n FROM model_budget_minutes").fetchone()["n"] == 0
    assert sql.execute("SELECT count(*) AS n FROM tenant_token_days").fetchone()["n"] == 0


def fill_tenant_day(sql: Any, job_id: Any, tokens: int) -> None:
    sql.execute(
        "INSERT INTO tenant_token_days (tenant, day, tokens) "
        "SELECT tenant, (now() AT TIME ZONE 'UTC')::date + d, %s "
        "FROM jobs, generate_series(0, 1) AS d WHERE id = %s",
        (tokens, job_id),
    )


@pytest.mark.asyncio
async def test_past_the_tenants_daily_budget_a_call_waits_for_the_next_utc_day(
    stack: Stack, sql: Any
) -> None:
    settings = stack.with_settings(tenant_daily_tokens=1000)
    before = budget_waits("tenant_day")
    async with engine_for(settings) as engine:
        job_id = await submit(engine, "support.triage", TICKET)
        fill_tenant_day(sql, job_id, 900)
        await handle_and_ack(engine, await receive_records(engine))
    row = job_row(sql, job_id)
    assert (row["state"], row["attempt"]) == (JobState.WAITING, 0)
    assert (row["wait_kind"], row["wait_key"]) == ("timer", "tenant-daily-tokens")
    midnight = sql.execute(
        "SELECT ((now() AT TIME ZONE 'UTC')::date + 1)::timestamp AT TIME ZONE 'UTC' AS at"
    ).fetchone()["at"]
    assert row["wake_at"] == midnight
    assert stack.model_calls() == []
    assert budget_waits("tenant_day") == before + 1


@pytest.mark.asyncio
async def test_past_the_tenants_daily_budget_a_call_fails_when_the_policy_says_fail(
    stack: Stack, sql: Any
) -> None:
    from app.services import tenant_limits

    settings = stack.with_settings(tenant_budget_policy="fail")
    async with engine_for(settings) as engine:
        job_id = await submit(engine, "support.triage", TICKET)
        tenant = job_row(sql, job_id)["tenant"]
        # A budget of the tenant's own (`tasklease limits set --daily-tokens`), no default.
        await tenant_limits.set_daily_tokens(engine.db, tenant, 1000)
        fill_tenant_day(sql, job_id, 900)
        await handle_and_ack(engine, await receive_records(engine))
    row = job_row(sql, job_id)
    assert row["state"] == JobState.DEAD_LETTERED
    assert row["attempt"] == 1
    assert f"tenant {tenant}'s daily token budget (1000 tokens" in row["last_error"]
    assert "TASKLEASE_TENANT_BUDGET_POLICY=fail" in row["last_error"]
    assert stack.model_calls() == []


@pytest.mark.asyncio
async def test_a_tenants_day_is_settled_with_the_reported_usage(stack: Stack, sql: Any) -> None:
    settings = stack.with_settings(tenant_daily_tokens=100_000)
    async with engine_for(settings) as engine:
        job_id = await submit(engine, "support.triage", TICKET)
        await handle_and_ack(engine, await receive_records(engine))
    assert job_row(sql, job_id)["state"] == JobState.SUCCEEDED
    used = sql.execute(
        "SELECT input_tokens + output_tokens AS n FROM effects WHERE job_id = %s", (job_id,)
    ).fetchone()["n"]
    days = sql.execute("SELECT tokens FROM tenant_token_days").fetchall()
    assert [d["tokens"] for d in days] == [used]
