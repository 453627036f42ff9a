"""A worker that does not serve the version a pinned job started on, killed right after it
handed the job back (crash point after_version_handed_back: the job is queued again, its
attempt given back, unrun; the message not deleted, due back in NOT_SERVED_VISIBILITY_SECONDS):
the message comes back, and a worker that serves the version runs the job there, once
(docs/howto/kind-versions.md). Worker processes as a deployment runs them, each naming
its kinds in TASKLEASE_KINDS."""

from __future__ import annotations

import os
from typing import Any

import pytest

from app.crashpoints import Point
from app.services import callbacks
from app.states import JobState
from tests import helpers
from tests.conftest import Stack, job_row
from tests.e2e.test_crash_points import died_by_sigkill
from tests.helpers import crash_env
from tests.invariants import check_invariants, describe, effects, timeline, wait_for_state
from tests.versioned_kinds import deployed, pinned_v1

pytestmark = pytest.mark.e2e


def serving(*modules: str) -> dict[str, str]:
    """A worker's environment: the demos (as every test worker) and these kinds."""
    return {"TASKLEASE_KINDS": ",".join([os.environ["TASKLEASE_KINDS"], *modules])}


@pytest.mark.asyncio
async def test_a_worker_killed_after_handing_back_a_pinned_job_loses_nothing(
    stack: Stack, sql: Any
) -> None:
    # Given a job of "shop.pinned" started on version 1, waiting for its callback...
    first = stack.worker(env=serving("tests.pinned_v1_only"), name="v1")
    async with helpers.engine_for(stack.settings) as engine:
        with deployed(pinned_v1):
            job_id = await helpers.submit(engine, "shop.pinned", {})
        wait_for_state(sql, job_id, JobState.WAITING, timeout=60)
        first.terminate()
        first.wait(30)
        # ...and a worker that serves only version 2, armed to die once it hands it back.
        doomed = stack.worker(
            env={**serving("tests.pinned_v2_only"), **crash_env(Point.AFTER_VERSION_HANDED_BACK)},
            name="doomed",
        )
        # When the callback's answer wakes the job there.
        token = await callbacks.token_for(engine.db, job_id, "go")
        await callbacks.answer(engine.db, engine.queue, token, result=True)
        died_by_sigkill(doomed, "the worker armed at after_version_handed_back")
    row = job_row(sql, job_id)
    assert (row["state"], row["attempt"], row["runs"]) == (JobState.QUEUED, 0, 1), describe(
        sql, job_id
    )
    assert row["kind_version"] == "1"
    assert [e["key"] for e in effects(sql, job_id)] == ["charge", "callback:go"]

    # Then a worker serving both versions runs it on version 1, once.
    stack.worker(env=serving("tests.pinned_v1_only", "tests.pinned_v2_only"), name="both")
    row = wait_for_state(sql, job_id, JobState.SUCCEEDED, timeout=60)
    assert (row["result"], row["attempt"], row["runs"]) == ("v1", 1, 2), describe(sql, job_id)
    assert [e["key"] for e in effects(sql, job_id)] == ["charge", "callback:go"]
    assert any("this worker serves version 2" in (e["detail"] or "") for e in timeline(sql, job_id))
    check_invariants(sql, stack, [job_id])
