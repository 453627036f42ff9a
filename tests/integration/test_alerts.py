"""Outgoing alerts (docs/explain/design.md#alerts): written in the event's transaction,
delivered by the sweeper as signed webhooks to a real HTTP receiver (the stack's webhook
receiver process), retried with the same webhook-id, and once per threshold crossing."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import httpx
import pytest
from prometheus_client import REGISTRY

from app import store
from app.services import alerts, sweeper
from app.states import JobState
from tasklease.webhooks import WebhookVerificationError, new_secret, verify_webhook
from tests.conftest import Stack, job_row
from tests.helpers import drain, engine_for, submit

pytestmark = pytest.mark.integration

SECRET = new_secret()


def deliveries(outcome: str) -> float:
    labels = {"destination": "webhook", "outcome": outcome}
    return REGISTRY.get_sample_value("tasklease_alert_deliveries_total", labels) or 0.0


def received(url: str) -> dict[str, Any]:
    doc: dict[str, Any] = httpx.get(f"{url}/alerts", timeout=10).json()
    return doc


def alert_rows(sql: Any, type_: str | None = None) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = sql.execute(
        "SELECT * FROM alerts WHERE %(t)s::text IS NULL OR type = %(t)s ORDER BY id",
        {"t": type_},
    ).fetchall()
    return rows


async def dead_letter(engine: Any, sql: Any) -> Any:
    """A job dead-lettered by the engine, the way a permanent failure does it."""
    job_id = await submit(engine, "demo.flaky", {"permanent": True})
    await drain(engine, sql, [job_id])
    assert job_row(sql, job_id)["state"] == JobState.DEAD_LETTERED
    return job_id


@pytest.mark.asyncio
async def test_a_dead_letter_produces_exactly_one_signed_webhook(stack: Stack, sql: Any) -> None:
    url = stack.start_webhook(name="alerts-receiver")
    settings = stack.with_settings(alert_webhook_url=f"{url}/alerts", alert_webhook_secret=SECRET)
    async with engine_for(settings) as engine:
        job_id = await dead_letter(engine, sql)
        # The alert row was written with the transition, before any sweep.
        [row] = alert_rows(sql)
        assert row["dedup_key"].startswith(f"dead_lettered:{job_id}:")
        assert row["delivered_at"] is None
        # When: three sweeps run (the first delivers; the others find nothing due).
        for _ in range(3):
            await sweeper.sweep_once(settings, engine.db, engine.queue)

    # Then: one delivery, signed with the secret, saying which job and why.
    got = await asyncio.to_thread(received, url)
    assert got["count"] == 1, got
    [delivery] = got["alerts"]
    assert delivery["webhook_id"] == row["dedup_key"]
    body = verify_webhook(SECRET, delivery["headers"], delivery["raw"])
    assert body["type"] == "job.dead_lettered"
    assert body["job_id"] == str(job_id)
    assert body["tenant"] == job_row(sql, job_id)["tenant"]
    assert body["data"]["kind"] == "demo.flaky"
    assert "permanent failure on purpose" in body["data"]["error"]
    assert "dead-lettered" in body["summary"]
    # Another secret, or a body changed by one byte, does not verify.
    with pytest.raises(WebhookVerificationError):
        verify_webhook(new_secret(), delivery["headers"], delivery["raw"])
    with pytest.raises(WebhookVerificationError):
        verify_webhook(SECRET, delivery["headers"], delivery["raw"].replace("flaky", "flakY"))
    [done] = alert_rows(sql)
    assert done["delivered_at"] is not None
    assert done["delivered"] == ["webhook"]
    assert done["attempts"] == 1


@pytest.mark.asyncio
async def test_sweepers_racing_deliver_a_dead_letter_once(stack: Stack, sql: Any) -> None:
    url = stack.start_webhook(name="alerts-receiver")
    settings = stack.with_settings(alert_webhook_url=f"{url}/alerts", alert_webhook_secret=SECRET)
    async with engine_for(settings) as engine:
        await dead_letter(engine, sql)
        # Four sweepers at once, then one more: SKIP LOCKED shares, the mark ends it.
        counts = await asyncio.gather(*(alerts.deliver(settings, engine.db) for _ in range(4)))
        assert sorted(counts) == [0, 0, 0, 1]
        assert await alerts.deliver(settings, engine.db) == 0
    got = await asyncio.to_thread(received, url)
    assert got["count"] == 1 and got["taken_twice"] == []


@pytest.mark.asyncio
async def test_a_receiver_that_fails_twice_gets_the_same_alert_again_until_it_takes_it(
    stack: Stack, sql: Any
) -> None:
    url = stack.start_webhook(name="alerts-receiver")
    settings = stack.with_settings(
        alert_webhook_url=f"{url}/alerts?fail=2",
        alert_webhook_secret=SECRET,
        alert_backoff_base_seconds=0.2,
        alert_backoff_cap_seconds=0.4,
    )
    sent_before, failed_before = deliveries("sent"), deliveries("failed")
    async with engine_for(settings) as engine:
        job_id = await dead_letter(engine, sql)
        first = await alerts.deliver(settings, engine.db)
        [failed_once] = alert_rows(sql)
        again = await alerts.deliver(settings, engine.db)  # not due yet: nothing sent
        deadline = time.monotonic() + 20
        delivered = 0
        while not delivered and time.monotonic() < deadline:
            await asyncio.sleep(0.25)
            delivered = await alerts.deliver(settings, engine.db)

    assert (first, again, delivered) == (0, 0, 1)
    assert deliveries("failed") - failed_before == 2
    assert deliveries("sent") - sent_before == 1
    assert failed_once["attempts"] == 1
    assert "webhook: HTTP 503" in failed_once["last_error"]
    assert failed_once["next_attempt_at"] > failed_once["created_at"]
    got = await asyncio.to_thread(received, url)
    # Three deliveries of one alert: the same webhook-id, each signed, taken once.
    assert [a["answered"] for a in got["alerts"]] == [503, 503, 200]
    assert {a["webhook_id"] for a in got["alerts"]} == {f"{failed_once['dedup_key']}"}
    assert got["taken_twice"] == []
    for a in got["alerts"]:
        assert verify_webhook(SECRET, a["headers"], a["raw"])["job_id"] == str(job_id)
    [row] = alert_rows(sql)
    assert row["attempts"] == 3
    assert row["delivered_at"] is not None


@pytest.mark.asyncio
async def test_an_alert_is_given_up_after_its_attempts_and_kept_with_its_error(
    stack: Stack, sql: Any
) -> None:
    url = stack.start_webhook(name="alerts-receiver")
    settings = stack.with_settings(
        alert_webhook_url=f"{url}/alerts?fail=100",
        alert_webhook_secret=SECRET,
        alert_max_attempts=2,
        alert_backoff_base_seconds=0.05,
        alert_backoff_cap_seconds=0.05,
    )
    async with engine_for(settings) as engine:
        await dead_letter(engine, sql)
        for _ in range(6):
            await alerts.deliver(settings, engine.db)
            await asyncio.sleep(0.1)
    [row] = alert_rows(sql)
    assert row["attempts"] == 2
    assert row["given_up_at"] is not None
    assert row["delivered_at"] is None
    assert (await asyncio.to_thread(received, url))["count"] == 2


@pytest.mark.asyncio
async def test_a_stalled_job_alerts_once_and_goes_to_its_tenants_own_webhook_too(
    stack: Stack, sql: Any
) -> None:
    url = stack.start_webhook(name="alerts-receiver")
    settings = stack.with_settings(alert_webhook_url=f"{url}/alerts", alert_webhook_secret=SECRET)
    async with engine_for(settings) as engine:
        job_id = await submit(engine, "demo.noop", {})
        tenant = job_row(sql, job_id)["tenant"]
        hook = await alerts.set_tenant_webhook(engine.db, tenant, f"{url}/alerts", None)
        assert hook.secret is not None and hook.secret.startswith("whsec_")
        # A lease that ran out with no heartbeat: the sweeper marks it stalled.
        sql.execute(
            "UPDATE jobs SET state = 'running', lease_token = gen_random_uuid(), "
            "lease_owner = 'gone', lease_expires_at = now() - interval '10 seconds' "
            "WHERE id = %s",
            (job_id,),
        )
        await store.leases.mark_stalled(engine.db, grace=1, limit=10)
        await store.leases.mark_stalled(engine.db, grace=1, limit=10)  # nothing more to mark
        await alerts.deliver(settings, engine.db)
        await alerts.deliver(settings, engine.db)

    [row] = alert_rows(sql)
    assert row["type"] == "job.stalled"
    assert row["delivered"] == ["tenant_webhook", "webhook"]
    got = await asyncio.to_thread(received, url)
    assert got["count"] == 2  # the deployment's webhook and the tenant's: one each
    signed = sorted("deployment" if _verifies(SECRET, a) else "tenant" for a in got["alerts"])
    assert signed == ["deployment", "tenant"]
    for a in got["alerts"]:
        if not _verifies(SECRET, a):
            assert hook.secret is not None
            assert verify_webhook(hook.secret, a["headers"], a["raw"])["type"] == "job.stalled"


def _verifies(secret: str, delivery: dict[str, Any]) -> bool:
    try:
        verify_webhook(secret, delivery["headers"], delivery["raw"])
    except WebhookVerificationError:
        return False
    return True


@pytest.mark.asyncio
async def test_the_dlq_threshold_alerts_once_per_crossing_even_with_sweepers_racing(
    stack: Stack, sql: Any
) -> None:
    settings = stack.with_settings(alert_dlq_threshold=2)
    async with engine_for(settings) as engine:
        first = await dead_letter(engine, sql)
        assert await alerts.check_thresholds(settings, engine.db) == 0  # 1 < 2
        await dead_letter(engine, sql)
        # Five sweepers measure at once: one crossing, one alert.
        racing = await asyncio.gather(
            *(alerts.check_thresholds(settings, engine.db) for _ in range(5))
        )
        assert sum(racing) == 1
        assert await alerts.check_thresholds(settings, engine.db) == 0  # still over
        # Under the threshold re-arms it; over again is a second crossing.
        sql.execute("UPDATE jobs SET state = 'cancelled' WHERE id = %s", (first,))
        assert await alerts.check_thresholds(settings, engine.db) == 0
        await dead_letter(engine, sql)
        assert await alerts.check_thresholds(settings, engine.db) == 1

    rows = alert_rows(sql, "dlq.over_threshold")
    assert [r["dedup_key"] for r in rows] == ["dlq_over_threshold:1", "dlq_over_threshold:2"]
    assert rows[0]["detail"]["dead_lettered"] == 2
    assert rows[0]["detail"]["threshold"] == 2


@pytest.mark.asyncio
async def test_the_oldest_queued_job_past_its_age_alerts_once(stack: Stack, sql: Any) -> None:
    settings = stack.with_settings(alert_oldest_queued_seconds=1)
    async with engine_for(settings) as engine:
        job_id = await submit(engine, "demo.noop", {})  # queued; nobody takes it
        assert await alerts.check_thresholds(settings, engine.db) == 0
        await asyncio.sleep(1.5)
        assert await alerts.check_thresholds(settings, engine.db) == 1
        assert await alerts.check_thresholds(settings, engine.db) == 0
    [row] = alert_rows(sql, "queue.oldest_over_threshold")
    assert row["detail"]["job_id"] == str(job_id)
    assert row["detail"]["age_seconds"] > 1


@pytest.mark.asyncio
async def test_a_tenants_token_budget_used_up_alerts_once_a_day(stack: Stack, sql: Any) -> None:
    async with engine_for(stack.settings) as engine:
        job_id = await submit(engine, "demo.noop", {})
        took = await store.model_limits.reserve_tenant(engine.db, job_id, tokens=60, default=100)
        assert took is not None and took.day is not None
        assert alert_rows(sql) == []
        for _ in range(3):  # refused: over the day's 100 tokens, three times
            refused = await store.model_limits.reserve_tenant(
                engine.db, job_id, tokens=50, default=100
            )
            assert refused is not None and refused.day is None
    [row] = alert_rows(sql)
    assert row["type"] == "tenant.budget_exhausted"
    assert row["tenant"] == job_row(sql, job_id)["tenant"]
    assert row["dedup_key"] == f"budget_exhausted:{row['tenant']}:{took.day}"
    assert row["detail"]["budget"] == 100


@pytest.mark.asyncio
async def test_with_nowhere_to_send_an_alert_is_kept_as_delivered_to_no_one(
    stack: Stack, sql: Any
) -> None:
    async with engine_for(stack.settings) as engine:
        await dead_letter(engine, sql)
        assert await alerts.deliver(stack.settings, engine.db) == 1
        listed = await alerts.list_alerts(engine.db, scope=None, type_=None, limit=10)
    [row] = alert_rows(sql)
    assert row["delivered_at"] is not None and row["delivered"] == []
    assert [a["dedup_key"] for a in listed] == [row["dedup_key"]]


def test_a_bad_tenant_webhook_is_refused_naming_what_is_wrong(stack: Stack, sql: Any) -> None:
    async def go() -> list[str]:
        said = []
        async with store.connect(stack.database_url) as db:
            for tenant, url, secret in [
                ("acme", "ftp://x", None),
                ("acme", "https://x.example/hook", "not-a-secret"),
                ("no spaces", "https://x.example/hook", None),
                # What the delivery's HTTP client would refuse, refused here instead.
                ("acme", "http://hooks.example:abc/x", None),
                ("acme", "http://hooks.example/a\x01b", None),
            ]:
                try:
                    await alerts.set_tenant_webhook(db, tenant, url, secret)
                except Exception as exc:
                    said.append(str(exc))
        return said

    said = asyncio.run(go())
    assert "is not an http:// or https:// URL" in said[0]
    assert "whsec_" in said[1]
    assert "tenant 'no spaces' is not valid" in said[2]
    assert "is not a valid URL" in said[3] and "Port" in said[3]
    assert "is not a valid URL" in said[4]
    assert sql.execute("SELECT count(*) AS n FROM tenant_alert_webhooks").fetchone()["n"] == 0


@pytest.mark.asyncio
async def test_a_sweep_stops_after_a_batch_that_went_nowhere(stack: Stack, sql: Any) -> None:
    """A destination that is down costs a sweep one batch of time-outs, not five."""
    url = stack.start_webhook(name="alerts-receiver")
    settings = stack.with_settings(
        alert_webhook_url=f"{url}/alerts?fail=100", alert_webhook_secret=SECRET
    )
    extra = alerts.BATCH + 5
    sql.execute(
        "INSERT INTO alerts (dedup_key, type, tenant, detail) "
        "SELECT 'dead_lettered:x:' || i, 'job.dead_lettered', 'acme', '{}' "
        "FROM generate_series(1, %s) AS i",
        (extra,),
    )
    async with engine_for(settings) as engine:
        assert await alerts.deliver(settings, engine.db) == 0
    tried = sql.execute("SELECT count(*) AS n FROM alerts WHERE attempts = 1").fetchone()["n"]
    assert tried == alerts.BATCH
    assert (await asyncio.to_thread(received, url))["count"] == alerts.BATCH
