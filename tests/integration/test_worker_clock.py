"""The kind's clock (``ctx.now()``) follows the database's and never runs ahead of it,
however long the claim's answer took to come back (issue 30, item 16: measured from
before the claim, a slow claim pushed a worker's clock ahead by as long as it took, and
the chaos gate saw a redelivered nap wake ~100 ms before it was due)."""

from __future__ import annotations

import asyncio
import datetime as dt
from typing import Any

import pydantic
import pytest

from app import kinds
from app.kinds import JobContext, kind
from app.states import JobState
from tests.conftest import Stack, job_row
from tests.helpers import engine_for, handle_and_ack, receive_records, submit

pytestmark = pytest.mark.integration


class Nothing(pydantic.BaseModel):
    pass


async def _clock(ctx: JobContext[None], p: Nothing) -> str:
    return ctx.now().isoformat()


CLOCK = "test.clock"
if CLOCK not in kinds.REGISTRY:
    kinds.register(kind(CLOCK, timeout_seconds=30)(_clock))

WAITED = 0.6  # the claim waits this long (for its batch, a connection) before the database
ANSWER = 0.2  # and its answer this long, after the database read its clock


@pytest.mark.asyncio
async def test_a_slow_claim_answer_does_not_put_the_kind_s_clock_ahead(
    stack: Stack, sql: Any
) -> None:
    async with engine_for(stack.settings) as engine:
        claims: Any = engine._claims
        real_submit = claims.submit

        async def slow_answer(claim: Any) -> Any:
            await asyncio.sleep(WAITED)
            verdict = await real_submit(claim)
            await asyncio.sleep(ANSWER)
            return verdict

        claims.submit = slow_answer
        job_id = await submit(engine, CLOCK, {})
        await handle_and_ack(engine, await receive_records(engine))
    job = job_row(sql, job_id)
    assert job["state"] == JobState.SUCCEEDED
    kind_now = dt.datetime.fromisoformat(job["result"])
    leased_at = sql.execute(
        "SELECT at FROM job_events WHERE job_id = %s AND to_state = 'leased'", (job_id,)
    ).fetchone()["at"]
    # Not ahead of the database: the job finished (the database's clock) after the kind
    # read its clock; measured from before the claim, it read ~WAITED ahead.
    assert kind_now <= job["finished_at"], (kind_now, job["finished_at"])
    # And not behind the claim's own database time: a timer the claim found due is due.
    assert kind_now >= leased_at - dt.timedelta(seconds=0.1), (kind_now, leased_at)
