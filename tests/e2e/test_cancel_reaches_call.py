"""Cancellation that reaches the call (issue 16), with a real worker process.

A ``POST /v1/jobs/{id}/cancel`` of a job streaming from an OpenAI-compatible server (a
real HTTP server in this test, streaming slowly) closes the worker's connection to it
within a second or two, with a 30 s visibility timeout (a heartbeat every 10 s cannot
explain that); the job ends cancelled with nothing written after the cancel. And a worker
SIGKILLed right after it got the notification leaves the job to end cancelled anyway,
once, with nothing written after the cancel.
"""

from __future__ import annotations

import time
from typing import Any

import pytest

from app.crashpoints import Point
from app.states import JobState
from tests.conftest import Stack, job_row, wait_for
from tests.e2e.test_auth_cli import cli
from tests.e2e.test_crash_points import died_by_sigkill
from tests.helpers import crash_env, serving
from tests.invariants import chunks, describe, effects, timeline, wait_for_state
from tests.slow_model import SlowOpenAI

pytestmark = pytest.mark.e2e

LONG_LEASE = {"TASKLEASE_VISIBILITY_TIMEOUT_SECONDS": "30"}  # a heartbeat every 10 s
HEARTBEAT_SECONDS = 10.0
WITHIN_SECONDS = 5.0  # half the heartbeat: only the notification is this quick


def submit_write(api: Any, words: int = 60) -> str:
    resp = api.post(
        "/v1/jobs", json={"kind": "demo.write", "payload": {"prompt": "p", "words": words}}
    )
    assert resp.status_code == 202, resp.text
    return str(resp.json()["id"])


def cancelled_once(sql: Any, job_id: str) -> dict[str, Any]:
    """The job's one cancelled event (and no other end); fails showing the timeline."""
    ends = [e for e in timeline(sql, job_id) if e["to_state"] == JobState.CANCELLED]
    assert len(ends) == 1, describe(sql, job_id)
    return ends[0]


TICKET = {
    "ticket_id": "T-1",
    "subject": "Refund",
    "body": "Charged twice",
    "customer_email": "a@b.c",
}
# A streamed answer (its chunks are written as they come) and a plain model call (nothing
# is written until it returns: only the notification can stop it early).
CALLS = {
    "streamed": ("demo.write", {"prompt": "p", "words": 60}),
    "plain": ("support.triage", TICKET),
}


@pytest.mark.parametrize("call", list(CALLS))
def test_a_cancel_closes_the_model_connection_within_seconds(
    stack: Stack, sql: Any, api: Any, call: str
) -> None:
    with serving(server := SlowOpenAI(piece_seconds=0.05)):
        # Given a job in a model call to the slow server, through a worker process.
        env = {
            **LONG_LEASE,
            "TASKLEASE_MODEL_PROVIDER": "openai",
            "TASKLEASE_OPENAI_BASE_URL": server.url,
        }
        worker = stack.worker(env=env)
        kind, payload = CALLS[call]
        resp = api.post("/v1/jobs", json={"kind": kind, "payload": payload})
        assert resp.status_code == 202, resp.text
        job_id = str(resp.json()["id"])
        assert server.streaming.wait(60), f"no model call\n{stack.logs()}"
        wait_for(lambda: server.sent >= 5, timeout=10, what="the answer streaming")
        assert job_row(sql, job_id)["state"] == JobState.RUNNING

        # When the caller cancels it.
        asked = time.monotonic()
        resp = api.post(f"/v1/jobs/{job_id}/cancel")
        assert resp.status_code == 200, resp.text
        assert resp.json()["cancel_requested"] is True
        written_at_cancel = len(chunks(sql, job_id))

        # Then the provider sees its connection closed within seconds, far under the
        # heartbeat interval, because the worker was notified.
        assert server.closed.wait(15), f"connection never closed\n{stack.logs()}"
        assert server.closed_at is not None
        took = server.closed_at - asked
        assert took < WITHIN_SECONDS < HEARTBEAT_SECONDS, f"closed {took:.2f} s after the cancel"
        if call == "plain":  # a streamed answer may also be stopped by its refused write
            log = worker.log_path.read_text()  # type: ignore[attr-defined]
            assert "stopping: cancel asked for (notify)" in log

        # And the job ends cancelled, once, fenced, with nothing written after the cancel.
        wait_for_state(sql, job_id, JobState.CANCELLED, timeout=15)
        assert cancelled_once(sql, job_id)["detail"] == "cancelled while running"
        assert len(chunks(sql, job_id)) == written_at_cancel
        assert effects(sql, job_id) == []
        assert server.requests == 1
        assert worker.poll() is None


def test_a_worker_killed_right_after_the_notify_leaves_the_job_cancelled_once(
    stack: Stack, sql: Any, api: Any
) -> None:
    # Given a worker armed to die right after it gets a cancel notification, streaming an
    # answer from the fake model (a word every 100 ms: ~20 s).
    slow = {"TASKLEASE_FAKE_MODEL_CHUNK_MS": "100"}
    doomed = stack.worker(env={**crash_env(Point.AFTER_CANCEL_NOTIFY), **slow}, name="doomed")
    job_id = submit_write(api, words=200)
    wait_for(lambda: len(chunks(sql, job_id)) >= 2, timeout=60, what="chunks streaming")

    # When the operator cancels it from the command line, the worker dies there.
    code, out, err = cli(stack, "jobs", "cancel", job_id)
    assert code == 0, err
    assert "cancel requested" in out
    died_by_sigkill(doomed, "the worker armed at after_cancel_notify", timeout=20)
    at_death = job_row(sql, job_id)
    assert at_death["state"] == JobState.RUNNING and at_death["cancel_requested"]
    written = len(chunks(sql, job_id))

    # Then another worker ends it cancelled (its lease expired), exactly once, and nothing
    # more was written or called.
    stack.worker(env=slow, name="rescuer")
    wait_for_state(sql, job_id, JobState.CANCELLED, timeout=30)
    cancelled_once(sql, job_id)
    assert len(chunks(sql, job_id)) == written
    assert effects(sql, job_id) == []
    calls = [c for c in stack.model_calls() if c["key"] == f"{job_id}:answer"]
    assert len(calls) == 1, calls
