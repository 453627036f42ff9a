"""End to end: an API process and worker processes, started as a user would and
killed as a crash would (SIGKILL, a real signal)."""

from __future__ import annotations

import os
import signal
from typing import Any

import httpx
import pytest

from app.states import JobState
from tests.conftest import Stack, api_client, job_row, wait_for
from tests.helpers import crash_env

pytestmark = pytest.mark.e2e

TICKET = {
    "ticket_id": "T-42",
    "subject": "App crashes on login",
    "body": "Since the update the app crashes with an error when I sign in.",
    "customer_email": "sam@example.com",
}


def settled(sql: Any, job_id: str, state: JobState = JobState.SUCCEEDED) -> Any:
    def check() -> Any:
        row = job_row(sql, job_id)
        return row if row["state"] == state else None

    return check


def effects(sql: Any, job_id: str) -> list[dict[str, Any]]:
    return sql.execute(
        "SELECT key, attempt, worker FROM effects WHERE job_id = %s ORDER BY seq", (job_id,)
    ).fetchall()


def deliveries(hook: str) -> dict[str, Any]:
    return httpx.get(f"{hook}/deliveries", timeout=10).json()  # type: ignore[no-any-return]


def test_happy_path_through_the_api_and_a_real_worker_process(stack: Stack, sql: Any) -> None:
    hook = stack.webhook()
    api = stack.api()
    stack.worker()
    with api_client(api, stack.key()) as client:
        resp = client.post("/v1/jobs", json={"kind": "support.triage", "payload": TICKET})
        assert resp.status_code == 202, resp.text
        job_id = resp.json()["id"]
        assert resp.headers["location"] == f"/v1/jobs/{job_id}"
        wait_for(
            lambda: client.get(f"/v1/jobs/{job_id}").json()["state"] == "succeeded",
            what="the job to succeed",
            timeout=60,
        )
        job = client.get(f"/v1/jobs/{job_id}").json()
        timeline = client.get(f"/v1/jobs/{job_id}/events").json()
        recorded = client.get(f"/v1/jobs/{job_id}/effects").json()
    assert job["result"]["category"] == "bug"
    assert job["result"]["delivered"] is True
    assert [e["to_state"] for e in timeline] == ["queued", "leased", "running", "succeeded"]
    assert {e["worker"] for e in timeline[1:]} == {"worker-2"}
    assert [e["key"] for e in recorded] == ["triage", "post"]
    got = deliveries(hook)
    assert got["count"] == 1
    assert got["by_key"] == {f"{job_id}:post": 1}


def test_a_worker_killed_after_its_model_effect_was_recorded_is_finished_by_another(
    stack: Stack, sql: Any
) -> None:
    """Given a worker that dies (SIGKILL) right after the model's answer is recorded,
    when another worker gets the message after the visibility timeout,
    then the job succeeds, the model was called once and each effect recorded once."""
    hook = stack.webhook()
    api = stack.api()
    doomed = stack.worker(env=crash_env("after_effect"), name="doomed")
    with api_client(api, stack.key()) as client:
        job_id = client.post("/v1/jobs", json={"kind": "support.triage", "payload": TICKET}).json()[
            "id"
        ]
    assert doomed.wait(60) == -signal.SIGKILL
    row = job_row(sql, job_id)
    assert row["state"] == JobState.RUNNING
    assert row["attempt"] == 1
    assert [e["key"] for e in effects(sql, job_id)] == ["triage"]

    stack.worker(name="rescuer")
    row = wait_for(settled(sql, job_id), what="the rescuer to finish the job", timeout=60)
    assert row["attempt"] == 2
    fx = effects(sql, job_id)
    assert [(e["key"], e["attempt"]) for e in fx] == [("triage", 1), ("post", 2)]
    calls = stack.model_calls()
    assert [c["key"] for c in calls] == [f"{job_id}:triage"]
    assert deliveries(hook)["by_key"] == {f"{job_id}:post": 1}


def test_a_worker_killed_mid_job_by_a_signal_resumes_after_its_last_effect(
    stack: Stack, sql: Any
) -> None:
    api = stack.api()
    victim = stack.worker(name="victim")
    with api_client(api, stack.key()) as client:
        job_id = client.post(
            "/v1/jobs", json={"kind": "demo.sleep", "payload": {"seconds": 0.7, "steps": 4}}
        ).json()["id"]
    wait_for(
        lambda: len(effects(sql, job_id)) >= 1, what="the first step to be recorded", timeout=60
    )
    os.kill(victim.pid, signal.SIGKILL)
    assert victim.wait(10) == -signal.SIGKILL
    done_before = len(effects(sql, job_id))
    assert job_row(sql, job_id)["state"] == JobState.RUNNING

    stack.worker(name="second")
    row = wait_for(settled(sql, job_id), what="the second worker to finish", timeout=60)
    fx = effects(sql, job_id)
    assert [e["key"] for e in fx] == ["step-0", "step-1", "step-2", "step-3"]
    assert all(e["attempt"] == 1 for e in fx[:done_before])
    assert all(e["attempt"] == 2 for e in fx[done_before:])
    assert row["result"] == {"steps": 4, "replayed": done_before}


def test_a_poller_stopped_between_receive_and_claim_uses_no_attempt(stack: Stack, sql: Any) -> None:
    api = stack.api()
    doomed = stack.worker(env=crash_env("after_receive"), name="doomed")
    with api_client(api, stack.key()) as client:
        job_id = client.post("/v1/jobs", json={"kind": "demo.noop", "payload": {}}).json()["id"]
    assert doomed.wait(60) == -signal.SIGKILL
    row = job_row(sql, job_id)
    assert row["state"] == JobState.QUEUED
    assert row["attempt"] == 0

    stack.worker(name="next")
    row = wait_for(settled(sql, job_id), what="the job to succeed", timeout=60)
    assert row["attempt"] == 1


def test_a_job_committed_but_not_sent_is_sent_by_the_outbox_relay(stack: Stack, sql: Any) -> None:
    """The API process dies after the commit, before the send: the sweeper's relay sends it."""
    submit = stack.spawn(
        "submit",
        "demo.noop",
        "--payload",
        "{}",
        env=crash_env("after_outbox_commit"),
        name="submit",
    )
    assert submit.wait(60) == -signal.SIGKILL
    rows = sql.execute(
        "SELECT j.id, o.sent_at FROM jobs j JOIN outbox o ON o.job_id = j.id"
    ).fetchall()
    assert len(rows) == 1
    assert rows[0]["sent_at"] is None
    job_id = rows[0]["id"]

    stack.worker()
    sweep = stack.spawn("sweep", "--once", name="sweep")
    assert sweep.wait(60) == 0
    wait_for(settled(sql, job_id), what="the relayed job to succeed", timeout=60)


def test_sigterm_lets_the_job_in_hand_finish_before_the_worker_exits(
    stack: Stack, sql: Any
) -> None:
    api = stack.api()
    worker = stack.worker()
    with api_client(api, stack.key()) as client:
        job_id = client.post(
            "/v1/jobs", json={"kind": "demo.sleep", "payload": {"seconds": 1.5, "steps": 1}}
        ).json()["id"]
    wait_for(
        lambda: job_row(sql, job_id)["state"] == JobState.RUNNING,
        what="the job to start",
        timeout=60,
    )
    worker.send_signal(signal.SIGTERM)
    assert worker.wait(30) == 0
    row = job_row(sql, job_id)
    assert row["state"] == JobState.SUCCEEDED
    assert row["attempt"] == 1
