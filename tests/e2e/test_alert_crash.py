"""A sweeper SIGKILLed while it delivers an alert (docs/explain/design.md#alerts).

``before_alert_sent``: the alert was taken (locked), nothing sent: the next sweep sends it
once. ``after_alert_sent``: the receiver took it, the row is not marked: the next sweep
sends it again with the same webhook-id, which is how the receiver recognises it (delivery
is at least once; the id makes processing exactly once). Never lost in either case."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import pytest

from app.crashpoints import Point
from app.states import JobState
from tasklease.webhooks import new_secret, verify_webhook
from tests.conftest import Stack, job_row
from tests.e2e.test_crash_points import died_by_sigkill
from tests.helpers import crash_env, drain, engine_for, submit

pytestmark = [pytest.mark.e2e, pytest.mark.carrier_neutral]

SECRET = new_secret()


def received(url: str) -> list[dict[str, Any]]:
    got: list[dict[str, Any]] = httpx.get(f"{url}/alerts", timeout=10).json()["alerts"]
    return got


def alert_row(sql: Any) -> dict[str, Any]:
    row: dict[str, Any] = sql.execute(
        "SELECT dedup_key, attempts, delivered, delivered_at FROM alerts"
    ).fetchone()
    return row


async def dead_lettered_with_an_alert(stack: Stack, sql: Any) -> Any:
    """A job dead-lettered by an engine in this process (no webhook configured here: the
    alert row is written, left for the sweeper processes below)."""
    async with engine_for(stack.settings) as engine:
        job_id = await submit(engine, "demo.flaky", {"permanent": True})
        await drain(engine, sql, [job_id])
    assert job_row(sql, job_id)["state"] == JobState.DEAD_LETTERED
    assert alert_row(sql)["delivered_at"] is None
    return job_id


def sweep(stack: Stack, url: str, point: Point | None = None) -> Any:
    env = {
        "TASKLEASE_ALERT_WEBHOOK_URL": f"{url}/alerts",
        "TASKLEASE_ALERT_WEBHOOK_SECRET": SECRET,
        **(crash_env(point) if point else {}),
    }
    return stack.spawn("sweep", "--once", env=env, name="sweeper")


@pytest.mark.asyncio
async def test_killed_after_the_alert_was_sent_it_is_sent_again_with_the_same_id(
    stack: Stack, sql: Any
) -> None:
    url = stack.start_webhook(name="alerts-receiver")
    job_id = await dead_lettered_with_an_alert(stack, sql)

    # When: a sweeper delivers the alert and is killed before it marks it.
    doomed = sweep(stack, url, Point.AFTER_ALERT_SENT)
    await asyncio.to_thread(died_by_sigkill, doomed, "the sweeper armed at after_alert_sent")
    first = await asyncio.to_thread(received, url)
    after_crash = alert_row(sql)

    # Then: the receiver has it, the row does not say so (its lock died with the process).
    assert [a["answered"] for a in first] == [200]
    assert after_crash["delivered_at"] is None and after_crash["attempts"] == 0

    # When: the next sweep runs.
    rerun = sweep(stack, url)
    assert await asyncio.to_thread(rerun.wait, 60) == 0, rerun.log_path.read_text()

    # Then: sent once more, with the same webhook-id and a valid signature; marked now.
    both = await asyncio.to_thread(received, url)
    assert len(both) == 2
    assert {a["webhook_id"] for a in both} == {after_crash["dedup_key"]}
    for a in both:
        assert verify_webhook(SECRET, a["headers"], a["raw"])["job_id"] == str(job_id)
    done = alert_row(sql)
    assert done["delivered_at"] is not None and done["attempts"] == 1

    # And a third sweep sends nothing more.
    third = sweep(stack, url)
    assert await asyncio.to_thread(third.wait, 60) == 0, third.log_path.read_text()
    assert len(await asyncio.to_thread(received, url)) == 2


@pytest.mark.asyncio
async def test_killed_before_the_alert_was_sent_the_next_sweep_sends_it_once(
    stack: Stack, sql: Any
) -> None:
    url = stack.start_webhook(name="alerts-receiver")
    job_id = await dead_lettered_with_an_alert(stack, sql)

    doomed = sweep(stack, url, Point.BEFORE_ALERT_SENT)
    await asyncio.to_thread(died_by_sigkill, doomed, "the sweeper armed at before_alert_sent")
    assert await asyncio.to_thread(received, url) == []
    assert alert_row(sql)["delivered_at"] is None

    rerun = sweep(stack, url)
    assert await asyncio.to_thread(rerun.wait, 60) == 0, rerun.log_path.read_text()
    [delivery] = await asyncio.to_thread(received, url)
    assert verify_webhook(SECRET, delivery["headers"], delivery["raw"])["job_id"] == str(job_id)
    assert alert_row(sql)["delivered_at"] is not None
