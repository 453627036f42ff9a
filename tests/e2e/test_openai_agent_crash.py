"""An OpenAI Agents SDK agent (examples/openai_agent: triage hands off to a researcher
with three tools) in a real worker, SIGKILLed after the second of its three tool calls:
the next attempt, on another worker, sends no model request and calls no tool that ran
before the kill, and ends with the answer and the conversation an uninterrupted run has;
the job's stream (GET /v1/jobs/{id}/stream) reads each response's text once. The model is
the fake OpenAI-compatible server, its own process, over real HTTP; the tools log each
call to a file."""

from __future__ import annotations

from typing import Any

import pytest

from tests.conftest import ROOT, Stack, api_client
from tests.e2e.test_agent_crash import (
    finished,
    logged_tool_calls,
    model_requests,
    start_fake_model,
    stream_matches_records,
)
from tests.e2e.test_crash_points import died_by_sigkill
from tests.helpers import crash_env
from tests.unit.test_openai_agents import ANSWERS, QUESTION, STEPS
from tests.unit.test_openai_agents_stream import FINAL, response_texts

pytestmark = pytest.mark.e2e

KILL_AFTER = "oai:tool:read_page:call_3_read_page"
KIND = "examples.openai_agent"


def test_an_sdk_agent_killed_after_its_second_tool_call_repeats_no_request_and_no_tool(
    stack: Stack,
) -> None:
    stack.logs_dir.mkdir(parents=True, exist_ok=True)
    model_url = start_fake_model(stack)
    tools_log = stack.tmp / "tools.jsonl"
    stack.env.update(
        TASKLEASE_KINDS="examples.openai_agent",
        PYTHONPATH=str(ROOT),
        OPENAI_AGENT_BASE_URL=model_url,
        OPENAI_AGENT_API_KEY="test-key",
        OPENAI_AGENT_MODEL="fake-model",
        OPENAI_AGENT_TOOL_LOG=str(tools_log),
    )
    api = stack.api()
    doomed = stack.worker(env=crash_env(f"after_effect@{KILL_AFTER}"))

    def requests() -> list[dict[str, Any]]:
        return model_requests(model_url)

    def tool_calls() -> list[dict[str, Any]]:
        return logged_tool_calls(tools_log)

    with api_client(api, stack.key()) as client:
        submitted = client.post("/v1/jobs", json={"kind": KIND, "payload": QUESTION})
        assert submitted.status_code == 202, submitted.text
        job_id = submitted.json()["id"]
        died_by_sigkill(doomed, "the worker armed after the second tool call")
        # What ran before the kill: the handoff and two tool calls' requests, two tools.
        assert [r["answer"] for r in requests()] == ANSWERS[:3]
        assert [c["tool"] for c in tool_calls()] == ["search", "read_page"]

        stack.worker()  # takes the job once its message is visible again
        job = finished(client, job_id)
        effects = client.get(f"/v1/jobs/{job_id}/effects").json()
        texts = response_texts({e["key"]: e["result"] for e in effects})
        assert list(texts) == [FINAL]
        stream_matches_records(client, job_id, texts)
        crashed_requests, crashed_tools = requests(), tool_calls()

        # The same question, uninterrupted, on the healthy worker.
        calm_id = client.post("/v1/jobs", json={"kind": KIND, "payload": QUESTION}).json()["id"]
        calm = finished(client, calm_id)
        stream_matches_records(client, calm_id, {FINAL: calm["result"]["answer"]})
        usage = client.get("/v1/usage").json()

    # No request and no tool call repeated: each once over both attempts.
    assert [r["answer"] for r in crashed_requests] == ANSWERS
    assert len({r["digest"] for r in crashed_requests}) == len(ANSWERS)
    assert [c["tool"] for c in crashed_tools] == ["search", "read_page", "save_note"]
    assert crashed_tools[0]["pid"] == crashed_tools[1]["pid"] == doomed.pid
    assert crashed_tools[2]["pid"] != doomed.pid
    # The steps the killed attempt recorded are attempt 1's; the rest attempt 2's.
    assert [e["key"] for e in effects] == STEPS
    split = STEPS.index(KILL_AFTER) + 1
    assert {e["attempt"] for e in effects[:split]} == {1}
    assert {e["attempt"] for e in effects[split:]} == {2}
    assert job["attempt"] == 2 and calm["attempt"] == 1
    # The answer, the agent that gave it and the conversation equal the uninterrupted run's.
    assert job["result"] == calm["result"]
    assert job["result"]["agent"] == "researcher"
    # Every model response's tokens are the tenant's usage: 5 calls a job, none twice.
    rows = [r for r in usage["rows"] if r["kind"] == KIND]
    assert [(r["model"], r["calls"]) for r in rows] == [("fake-model", 2 * len(ANSWERS))]
