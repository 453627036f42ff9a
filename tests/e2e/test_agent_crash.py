"""A Pydantic AI agent (examples/research_agent) in a real worker, SIGKILLed after the
second of its three tool calls: the next attempt, on another worker, sends no model
request and calls no tool that ran before the kill, and ends with the answer and the
conversation an uninterrupted run has. The model is the fake OpenAI-compatible server,
its own process, over real HTTP; the tools log each call to a file."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.conftest import ROOT, Stack, api_client, wait_for
from tests.e2e.test_crash_points import died_by_sigkill
from tests.helpers import crash_env
from tests.unit.test_pydantic_ai import QUESTION, STEPS, conversation

pytestmark = pytest.mark.e2e

KILL_AFTER = "pai:tool:read_page:call_2_read_page"


def start_fake_model(stack: Stack) -> str:
    """``python -m app.tools.fakemodel`` on a free port: its base URL (ending in /v1)."""
    return stack.start_fake_model(name=f"fakemodel-{len(stack.procs)}")


def model_requests(model_url: str) -> list[dict[str, Any]]:
    """The requests the fake model answered, in order."""
    got: list[dict[str, Any]] = httpx.get(f"{model_url}/requests", timeout=10).json()["requests"]
    return got


def logged_tool_calls(tools_log: Path) -> list[dict[str, Any]]:
    """The tool calls every process logged (the examples' ``<PREFIX>TOOL_LOG``)."""
    lines = tools_log.read_text().splitlines() if tools_log.exists() else []
    return [json.loads(line) for line in lines]


def finished(client: httpx.Client, job_id: str) -> dict[str, Any]:
    def done() -> dict[str, Any] | None:
        job: dict[str, Any] = client.get(f"/v1/jobs/{job_id}").json()
        return job if job["state"] in ("succeeded", "dead_lettered") else None

    job = wait_for(done, what=f"job {job_id} to finish", timeout=90)
    assert job["state"] == "succeeded", job
    return job


def test_an_agent_killed_after_its_second_tool_call_repeats_no_request_and_no_tool(
    stack: Stack,
) -> None:
    stack.logs_dir.mkdir(parents=True, exist_ok=True)
    model_url = start_fake_model(stack)
    tools_log = stack.tmp / "tools.jsonl"
    stack.env.update(
        TASKLEASE_KINDS="examples.research_agent",
        PYTHONPATH=str(ROOT),
        RESEARCH_AGENT_BASE_URL=model_url,
        RESEARCH_AGENT_API_KEY="test-key",
        RESEARCH_AGENT_MODEL="fake-model",
        RESEARCH_AGENT_TOOL_LOG=str(tools_log),
    )
    api = stack.api()
    doomed = stack.worker(env=crash_env(f"after_effect@{KILL_AFTER}"))

    def requests() -> list[dict[str, Any]]:
        return model_requests(model_url)

    def tool_calls() -> list[dict[str, Any]]:
        return logged_tool_calls(tools_log)

    with api_client(api, stack.key()) as client:
        submitted = client.post("/v1/jobs", json={"kind": "examples.research", "payload": QUESTION})
        assert submitted.status_code == 202, submitted.text
        job_id = submitted.json()["id"]
        died_by_sigkill(doomed, "the worker armed after the second tool call")
        # What ran before the kill: two requests, two tool calls.
        assert [r["answer"] for r in requests()] == ["tool:search", "tool:read_page"]
        assert [c["tool"] for c in tool_calls()] == ["search", "read_page"]

        stack.worker()  # takes the job once its message is visible again
        job = finished(client, job_id)
        effects = client.get(f"/v1/jobs/{job_id}/effects").json()
        crashed_requests, crashed_tools = requests(), tool_calls()

        # The same question, uninterrupted, on the healthy worker.
        calm_id = client.post(
            "/v1/jobs", json={"kind": "examples.research", "payload": QUESTION}
        ).json()["id"]
        calm = finished(client, calm_id)
        usage = client.get("/v1/usage").json()

    # No request and no tool call repeated: each once over both attempts.
    assert [r["answer"] for r in crashed_requests] == [
        "tool:search",
        "tool:read_page",
        "tool:save_note",
        "text",
    ]
    assert len({r["digest"] for r in crashed_requests}) == 4
    assert [c["tool"] for c in crashed_tools] == ["search", "read_page", "save_note"]
    assert crashed_tools[0]["pid"] == crashed_tools[1]["pid"] == doomed.pid
    assert crashed_tools[2]["pid"] != doomed.pid
    # The steps the killed attempt recorded are attempt 1's; the rest attempt 2's.
    assert [e["key"] for e in effects] == STEPS
    split = STEPS.index(KILL_AFTER) + 1
    assert {e["attempt"] for e in effects[:split]} == {1}
    assert {e["attempt"] for e in effects[split:]} == {2}
    assert job["attempt"] == 2 and calm["attempt"] == 1
    # The answer and the conversation equal the uninterrupted run's.
    assert job["result"]["answer"] == calm["result"]["answer"]
    assert conversation(job["result"]["messages"]) == conversation(calm["result"]["messages"])
    # Every model request's tokens are the tenant's usage: 4 calls a job, none twice.
    rows = [r for r in usage["rows"] if r["kind"] == "examples.research"]
    assert [(r["model"], r["calls"]) for r in rows] == [("fake-model", 8)]
