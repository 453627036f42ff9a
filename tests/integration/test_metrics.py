"""GET /metrics counts what happened: submissions, outcomes, retries, dead letters,
latencies, effects, SQS requests and PostgreSQL round trips, read by Prometheus' own
parser; a `tasklease worker` process serves its own; a Lambda invocation writes EMF."""

from __future__ import annotations

import io
import json
import sys
import time
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from app.services import redrive, sweeper
from app.tools.stack import embedded
from tests.conftest import Stack, job_row, run
from tests.helpers import drain, engine_for, submit

pytestmark = pytest.mark.integration

Figures = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def parse(text: str) -> Figures:
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def scrape(api: Any) -> Figures:
    resp = api.get("/metrics", headers={"Authorization": ""})  # no key needed
    assert resp.status_code == 200, resp.text
    assert resp.headers["content-type"].startswith("text/plain")
    return parse(resp.text)


def moved(before: Figures, after: Figures, name: str, **labels: str) -> float:
    key = (name, tuple(sorted(labels.items())))
    return after.get(key, 0.0) - before.get(key, 0.0)


def post(api: Any, body: dict[str, Any], **headers: str) -> str:
    resp = api.post("/v1/jobs", json=body, headers=headers)
    assert resp.status_code in (200, 201, 202), resp.text
    return str(resp.json()["id"])


# The Redis carrier's steps (tasklease_redis_requests_total) that play SQS's actions.
REDIS_STEP = {
    "ReceiveMessage": "TAKE",
    "SendMessageBatch": "XADD",
    "ChangeMessageVisibility": "CHANGE_VISIBILITY",
}


def carrier_requests(stack: Stack, action: str) -> tuple[str, dict[str, str]]:
    """The counter of the carrier's requests that play SQS's ``action``, and its labels."""
    if stack.on_redis:
        return "tasklease_redis_requests_total", {"step": REDIS_STEP[action]}
    return "tasklease_sqs_requests_total", {"action": action}


def test_metrics_move_by_exactly_what_happened(api: Any, stack: Stack, sql: Any) -> None:
    before = scrape(api)
    sleeper = post(
        api, {"kind": "demo.sleep", "payload": {"steps": 2}}, **{"Idempotency-Key": "k1"}
    )
    assert (
        post(api, {"kind": "demo.sleep", "payload": {"steps": 2}}, **{"Idempotency-Key": "k1"})
        == sleeper
    )
    flaky = post(api, {"kind": "demo.flaky", "payload": {"fail_attempts": 1}})
    doomed = post(api, {"kind": "demo.flaky", "payload": {"permanent": True}})

    later = post(api, {"kind": "demo.noop", "payload": {}, "delay_seconds": 600})

    async def work() -> None:
        async with engine_for(stack.settings) as engine:
            await drain(engine, sql, [sleeper, flaky, doomed], deadline=20)

    async def redrive_and_sweep() -> None:
        async with engine_for(stack.settings) as engine:
            # The dead letter redriven (back to queued, not run here), then a sweep.
            await redrive.redrive(engine.settings, engine.db, engine.queue, job_ids=[doomed])
            await sweeper.sweep_once(engine.settings, engine.db, engine.queue)

    run(work())
    time.sleep(1.1)  # past the scrape-time figures' one-second cache
    dead = scrape(api)
    assert dead[("tasklease_dlq_messages", (("which", "visible"),))] == 1
    assert dead[("tasklease_jobs", (("kind", "demo.flaky"), ("state", "dead_lettered")))] == 1
    assert dead[("tasklease_oldest_queued_job_age_seconds", ())] == 0  # none queued
    run(redrive_and_sweep())
    assert [job_row(sql, j)["state"] for j in (sleeper, flaky, doomed, later)] == [
        "succeeded",
        "succeeded",
        "queued",
        "waiting",
    ]
    time.sleep(1.1)  # past the scrape-time figures' one-second cache
    after = scrape(api)

    def d(name: str, **labels: str) -> float:
        return moved(before, after, name, **labels)

    submitted = "tasklease_jobs_submitted_total"
    assert d(submitted, kind="demo.sleep", replay="false") == 1
    assert d(submitted, kind="demo.sleep", replay="true") == 1
    assert d(submitted, kind="demo.flaky", replay="false") == 2
    assert d(submitted, kind="demo.noop", replay="false") == 1
    assert d("tasklease_wakeups_total", path="submit") == 1  # the delayed job's
    assert d("tasklease_redrives_total") == 1
    assert d("tasklease_sweeper_passes_total") == 1
    completed = "tasklease_jobs_completed_total"
    assert d(completed, kind="demo.sleep", outcome="succeeded") == 1
    assert d(completed, kind="demo.flaky", outcome="succeeded") == 1
    assert d(completed, kind="demo.flaky", outcome="dead_lettered") == 1
    assert d("tasklease_job_retries_total", kind="demo.flaky") == 1
    assert d("tasklease_dead_letters_total", by="engine") == 1
    assert d("tasklease_effects_total", kind="demo.sleep", how="run") == 2
    assert d("tasklease_effects_total", kind="demo.sleep", how="replayed") == 0

    def requests(action: str) -> float:
        name, labels = carrier_requests(stack, action)
        return d(name, **labels)

    assert requests("ReceiveMessage") > 0
    assert requests("SendMessageBatch") >= 3
    assert requests("ChangeMessageVisibility") >= 1  # the retry
    assert d("tasklease_pg_round_trips_total") > 0
    # Histograms: each job's first lease, each attempt's run, each job's end.
    assert d("tasklease_job_queued_to_leased_seconds_count", kind="demo.flaky") == 2
    assert d("tasklease_job_queued_to_leased_seconds_count", kind="demo.sleep") == 1
    run_count = "tasklease_job_run_seconds_count"
    assert d(run_count, kind="demo.flaky", outcome="retrying") == 1
    assert d(run_count, kind="demo.flaky", outcome="succeeded") == 1
    assert d(run_count, kind="demo.flaky", outcome="dead_lettered") == 1
    done_count = "tasklease_job_submit_to_done_seconds_count"
    assert d(done_count, kind="demo.sleep", outcome="succeeded") == 1
    assert d("tasklease_job_submit_to_done_seconds_sum", kind="demo.sleep", outcome="succeeded") > 0

    # Read at scrape time from this test's database and DLQ.
    def jobs(kind: str, state: str) -> float:
        return after[("tasklease_jobs", (("kind", kind), ("state", state)))]

    assert jobs("demo.flaky", "succeeded") == 1
    assert jobs("demo.flaky", "queued") == 1  # the redriven one
    assert jobs("demo.flaky", "dead_lettered") == 0
    assert jobs("demo.noop", "waiting") == 1
    assert after[("tasklease_oldest_queued_job_age_seconds", ())] > 0
    assert after[("tasklease_dlq_messages", (("which", "visible"),))] == 0  # moved back
    # No tenant anywhere in what an unauthenticated scraper sees.
    assert not any("tenant" in dict(labels) for _, labels in after)


def test_a_wait_counts_its_wake_up_message_and_the_answer_that_wakes_it(
    api: Any, stack: Stack, sql: Any
) -> None:
    from tests.integration.test_api_waits import waiting_approval

    before = scrape(api)
    job_id, token = waiting_approval(api, stack, sql)  # suspended: its deadline's message
    answered = api.post(f"/v1/callbacks/{token}", json={"result": {"ok": True}})
    assert answered.status_code == 200, answered.text
    assert job_row(sql, job_id)["state"] == "queued"
    after = scrape(api)
    assert moved(before, after, "tasklease_wakeups_total", path="suspend") == 1
    assert moved(before, after, "tasklease_wakeups_total", path="callback") == 1
    run_count = "tasklease_job_run_seconds_count"
    assert moved(before, after, run_count, kind="demo.approval", outcome="waiting") == 1


def test_a_worker_process_serves_its_own_metrics(api: Any, stack: Stack, sql: Any) -> None:
    port = embedded.free_port()
    stack.worker(env={"TASKLEASE_METRICS_PORT": str(port)})
    job = post(api, {"kind": "demo.noop", "payload": {}})
    deadline = time.monotonic() + 20
    while job_row(sql, job)["state"] != "succeeded" and time.monotonic() < deadline:
        time.sleep(0.2)
    assert job_row(sql, job)["state"] == "succeeded"
    figures = parse(httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=5).text)
    key = ("tasklease_jobs_completed_total", (("kind", "demo.noop"), ("outcome", "succeeded")))
    assert figures[key] == 1  # that process's own count: it ran the one job
    name, labels = carrier_requests(stack, "ReceiveMessage")
    assert figures[(name, tuple(labels.items()))] > 0
    assert figures[("tasklease_pg_round_trips_total", ())] > 0


# --- EMF on Lambda -------------------------------------------------------------------

UNITS = {"Seconds", "Count", "None", "Milliseconds", "Bytes", "Percent"}


def check_emf(doc: dict[str, Any]) -> None:
    """The Embedded Metric Format specification's required structure."""
    meta = doc["_aws"]
    assert isinstance(meta["Timestamp"], int) and meta["Timestamp"] > 0
    directives = meta["CloudWatchMetrics"]
    assert isinstance(directives, list) and directives
    for directive in directives:
        assert isinstance(directive["Namespace"], str) and 1 <= len(directive["Namespace"]) <= 1024
        for dims in directive["Dimensions"]:
            assert isinstance(dims, list) and len(dims) <= 30
            for dim in dims:
                assert isinstance(doc[dim], str)  # a dimension's value is a root string
        metrics = directive["Metrics"]
        assert 1 <= len(metrics) <= 100
        for m in metrics:
            assert isinstance(m["Name"], str) and 1 <= len(m["Name"]) <= 1024
            assert m.get("Unit", "None") in UNITS
            assert isinstance(doc[m["Name"]], int | float)


@pytest.mark.sqs_only  # the Lambda handlers run on SQS only
def test_a_worker_invocation_on_lambda_writes_its_counts_as_emf(
    stack: Stack, sql: Any, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from app.transport import codec
    from handlers import emf, runtime
    from tests.integration.test_handlers import FakeLambdaContext, cold_start, event, record_like

    for k, v in stack.env.items():
        if k.startswith(("TASKLEASE_", "AWS_")):
            monkeypatch.setenv(k, v)

    async def go() -> Any:
        async with engine_for(stack.settings) as engine:
            return await submit(engine, "demo.noop", {})

    job = run(go())
    emf.flush(io.StringIO())  # what earlier tests counted is not this invocation's
    worker = cold_start("handlers.worker")
    try:
        template = event("sqs_event.json")["Records"][0]
        capsys.readouterr()
        worker.handler(
            {"Records": [record_like(template, codec.body_for(job))]}, FakeLambdaContext()
        )
        lines = [line for line in capsys.readouterr().out.splitlines() if '"_aws"' in line]
    finally:
        if worker._engine is not None:
            runtime.run(worker._engine.close)
        runtime.loop().close()
        sys.modules.pop("handlers.worker", None)
    assert job_row(sql, job)["state"] == "succeeded"
    docs = [json.loads(line) for line in lines]
    for doc in docs:
        check_emf(doc)
    done = [d for d in docs if d.get("kind") == "demo.noop" and d.get("outcome") == "succeeded"]
    assert [d["tasklease_jobs_completed_total"] for d in done] == [1]
    assert done[0]["_aws"]["CloudWatchMetrics"][0]["Dimensions"] == [["kind", "outcome"]]
    assert any(d.get("tasklease_pg_round_trips_total", 0) > 0 for d in docs)
    assert all(d["_aws"]["CloudWatchMetrics"][0]["Namespace"] == "tasklease" for d in docs)


def test_a_worker_whose_metrics_port_is_taken_stops_at_start_naming_the_variable(
    stack: Stack,
) -> None:
    import socket
    import subprocess

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = subprocess.run(
            [sys.executable, "-m", "app.cli", "worker"],
            env={**stack.env, "TASKLEASE_METRICS_PORT": str(port)},
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
    assert done.returncode == 2, done.stderr
    assert f"TASKLEASE_METRICS_PORT={port}" in " ".join(done.stderr.split())
