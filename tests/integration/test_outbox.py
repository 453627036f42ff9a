"""The one outbox send path: the API's fast path and the sweeper's relay record a failed
send the same way (one more attempt, and the error on the row)."""

from __future__ import annotations

from typing import Any

import pytest

from app.services import sweeper
from tests import carrier
from tests.conftest import Stack
from tests.helpers import engine_for, submit

pytestmark = pytest.mark.integration


def outbox_row(sql: Any, job_id: Any) -> dict[str, Any]:
    row: dict[str, Any] = sql.execute(
        "SELECT sent_at, send_attempts, last_error FROM outbox WHERE job_id = %s", (job_id,)
    ).fetchone()
    return row


@pytest.mark.asyncio
async def test_the_relay_records_a_failed_send_as_the_fast_path_does(
    stack: Stack, sql: Any
) -> None:
    """The relay used to leave a row it failed to send untouched: an operator saw one
    attempt however many relays had tried, and no error."""
    broken = carrier.broken_settings(stack, outbox_grace_seconds=0)
    working = stack.with_settings(outbox_grace_seconds=0)

    async with engine_for(broken) as engine:
        job_id = await submit(engine, "demo.noop", {})  # the fast path's send fails
        after_fast_path = outbox_row(sql, job_id)
        relayed = await sweeper.relay_outbox(broken, engine.db, engine.queue)
        after_failed_relay = outbox_row(sql, job_id)
    async with engine_for(working) as engine:
        resent = await sweeper.relay_outbox(working, engine.db, engine.queue)
    assert after_fast_path["sent_at"] is None
    assert (after_fast_path["send_attempts"], after_fast_path["last_error"]) == (1, "send failed")
    assert relayed == 0
    assert after_failed_relay["sent_at"] is None
    assert (after_failed_relay["send_attempts"], after_failed_relay["last_error"]) == (
        2,
        "send failed",
    )
    assert resent == 1
    sent = outbox_row(sql, job_id)
    assert sent["sent_at"] is not None
    assert sent["send_attempts"] == 3
