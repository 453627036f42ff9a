"""The example kind outside app/ (examples/summarize), started as a user would deploy
it: TASKLEASE_KINDS names its module and PYTHONPATH finds it, in the API process (which
validates its payload) and in a real worker process (which runs it)."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from tests.conftest import ROOT, Stack, api_client, wait_for

pytestmark = pytest.mark.e2e

DOC = {
    "doc_id": "D-1",
    "text": "Queues deliver at least once. Leases fence the workers. Effects run once.",
    "max_sentences": 2,
}


def test_the_example_kind_runs_end_to_end_through_tasklease_kinds(stack: Stack) -> None:
    hook = stack.webhook()
    stack.env["TASKLEASE_KINDS"] = "examples.summarize"
    stack.env["PYTHONPATH"] = str(ROOT)
    api = stack.api()
    stack.worker(env={"SUMMARIZE_WEBHOOK_URL": f"{hook}/hook"})
    with api_client(api, stack.key()) as client:
        bad = client.post("/v1/jobs", json={"kind": "examples.summarize", "payload": {"text": ""}})
        assert bad.status_code == 422, bad.text
        assert "payload.doc_id" in bad.text
        resp = client.post("/v1/jobs", json={"kind": "examples.summarize", "payload": DOC})
        assert resp.status_code == 202, resp.text
        job_id = resp.json()["id"]

        def done() -> dict[str, Any] | None:
            job: dict[str, Any] = client.get(f"/v1/jobs/{job_id}").json()
            return job if job["state"] == "succeeded" else None

        job = wait_for(done, what="the example job to succeed", timeout=60)
        recorded = client.get(f"/v1/jobs/{job_id}/effects").json()
    assert job["result"] == {
        "doc_id": "D-1",
        "summary": "Queues deliver at least once. Leases fence the workers.",
        "sentences": 2,
        "notified": True,
    }
    assert job["max_attempts"] == 4
    assert job["timeout_seconds"] == 60
    assert [e["key"] for e in recorded] == ["summarize", "notify"]
    got = httpx.get(f"{hook}/deliveries", timeout=10).json()
    assert got["by_key"] == {f"{job_id}:notify": 1}


def test_a_kinds_module_that_does_not_import_stops_the_worker_and_the_api(stack: Stack) -> None:
    stack.env["TASKLEASE_KINDS"] = "examples.summarize,examples.nowhere"
    for proc in (stack.spawn("api", "--port", "9", name="api"), stack.worker()):
        assert proc.wait(60) != 0
        log = proc.log_path.read_text()  # type: ignore[attr-defined]
        assert "TASKLEASE_KINDS: module 'examples.nowhere' does not import" in log, log
