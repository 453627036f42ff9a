"""Kind versions through the real worker, on each carrier the suite runs: a job keeps
the version it started on (its JSON shows it), and a kind redeployed under waiting jobs
does what its policy says, a diverging replay stopped with a clear error
(docs/howto/kind-versions.md; in memory: tests/unit/test_kind_versions.py)."""

from __future__ import annotations

import time
from collections.abc import Iterable
from typing import Any

import pytest

from app.services import callbacks
from app.states import JobState
from app.worker.engine import Engine
from tests.conftest import Stack, job_row
from tests.helpers import drain, engine_for, handle_and_ack, receive_records
from tests.versioned_kinds import deployed, order_model_charge, order_no_charge, order_v1

pytestmark = pytest.mark.integration


async def until_waiting(engine: Engine, sql: Any, job_ids: list[Any]) -> None:
    """Handle messages until every job waits for its callback (the caller asserts it)."""
    end = time.monotonic() + 30
    while time.monotonic() < end:
        states = sql.execute(
            "SELECT count(*) AS n FROM jobs WHERE id = ANY(%s::uuid[]) AND state = 'waiting'",
            ([str(j) for j in job_ids],),
        ).fetchone()
        if states["n"] == len(job_ids):
            return
        records = await receive_records(engine, wait=1)
        if records:
            await handle_and_ack(engine, records)


async def answer(engine: Engine, job_ids: Iterable[Any]) -> None:
    for job_id in job_ids:
        token = await callbacks.token_for(engine.db, job_id, "go")
        await callbacks.answer(engine.db, engine.queue, token, result=True)


def effects_of(sql: Any, job_id: Any) -> dict[str, str | None]:
    rows = sql.execute("SELECT key, shape FROM effects WHERE job_id = %s ORDER BY seq", (job_id,))
    return {r["key"]: r["shape"] for r in rows.fetchall()}


@pytest.mark.asyncio
async def test_a_job_keeps_its_version_and_a_replay_that_diverges_dead_letters_it(
    stack: Stack, sql: Any, api: Any
) -> None:
    async with engine_for(stack.settings) as engine:
        with deployed(order_v1):
            posted = [
                api.post("/v1/jobs", json={"kind": "shop.order", "payload": {}}) for _ in "ab"
            ]
            assert posted[0].json()["kind_version"] is None  # not started yet
            reshaped, dropped = [p.json()["id"] for p in posted]
            await until_waiting(engine, sql, [reshaped, dropped])
        assert api.get(f"/v1/jobs/{reshaped}").json()["kind_version"] == "1"
        assert effects_of(sql, reshaped) == {"charge": "effect", "callback:go": "callback"}

        # Given version 2 asking a model under the key version 1 charged under
        with deployed(order_model_charge):
            await answer(engine, [reshaped])
            await drain(engine, sql, [reshaped])
        # Then the job stops at that step, the model never asked
        row = job_row(sql, reshaped)
        assert (row["state"], row["kind_version"]) == (JobState.DEAD_LETTERED, "1")
        assert row["last_error"] == (
            "permanent: replay diverged at step 'charge': recorded as effect by the job's "
            "version 1, reached as model_call by version 2; nothing of it ran again "
            "(docs/howto/kind-versions.md)"
        )
        assert effects_of(sql, reshaped) == {"charge": "effect", "callback:go": "callback"}

        # Given version 2 without the charge: the job ends without reaching it
        with deployed(order_no_charge):
            await answer(engine, [dropped])
            await drain(engine, sql, [dropped])
        row = job_row(sql, dropped)
        assert (row["state"], row["result"]) == (JobState.DEAD_LETTERED, None)
        assert row["last_error"] == (
            "permanent: replay diverged: the code (version 2) returned without reaching "
            "recorded step 'charge', recorded as effect by the job's version 1; the result "
            "was not stored (docs/howto/kind-versions.md)"
        )
