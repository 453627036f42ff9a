"""Plain (not ``async def``) functions as effects, run by a real worker process (issue
30, item 1): before, ``ctx.effect("write", lambda: write_file(...))`` ran the function,
failed with ``TypeError: object dict can't be used in 'await' expression``, was retried
as transient (the file written twice) and dead-lettered. The kind is tests/plain_kinds.py,
loaded through TASKLEASE_KINDS as a user's would be; the in-memory runner's side of it is
tests/unit/test_plain_functions.py."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.conftest import ROOT, Stack, api_client, wait_for

pytestmark = pytest.mark.e2e


def test_a_plain_function_effect_runs_once_in_a_worker_and_the_job_succeeds(
    stack: Stack, tmp_path: Path
) -> None:
    out = tmp_path / "written.txt"
    stack.env["TASKLEASE_KINDS"] = "tests.plain_kinds"
    stack.env["PYTHONPATH"] = str(ROOT)
    api = stack.api()
    stack.worker()
    with api_client(api, stack.key()) as client:
        payload = {"path": str(out), "text": "hello"}
        resp = client.post("/v1/jobs", json={"kind": "test.plain_effects", "payload": payload})
        assert resp.status_code == 202, resp.text
        job_id = resp.json()["id"]

        def settled() -> dict[str, Any] | None:
            job: dict[str, Any] = client.get(f"/v1/jobs/{job_id}").json()
            return job if job["state"] in ("succeeded", "dead_lettered") else None

        job = wait_for(settled, what="the job to settle", timeout=60)
        recorded = client.get(f"/v1/jobs/{job_id}/effects").json()
    assert job["state"] == "succeeded", (job, stack.logs())
    assert job["attempt"] == 1
    assert job["result"] == {"written": "hello", "loud": "HELLO", "answer": "HELLO!"}
    assert out.read_text().splitlines() == ["hello", "model"]  # each side effect once
    assert [e["key"] for e in recorded] == ["write", "shout", "model"]
