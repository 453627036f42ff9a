"""A Pydantic AI agent (examples/research_agent) in a real worker, SIGKILLed after the
second of its three tool calls: the next attempt, on another worker, sends no model
request and calls no tool that ran before the kill. That worker is SIGKILLed in turn in
the middle of the final answer's stream (inside_stream), and a third finishes: the job's
stream (GET /v1/jobs/{id}/stream) reads the answer once, continued from the chunks
written before the kill, and the job ends with the answer and the conversation an
uninterrupted run has. The model is the fake OpenAI-compatible server, its own process,
over real HTTP; the tools log each call to a file."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import pytest

from app.crashpoints import Point
from tests.conftest import ROOT, Stack, api_client, wait_for
from tests.e2e.test_crash_points import died_by_sigkill
from tests.e2e.test_stream_crash import streamed_chunks
from tests.helpers import crash_env
from tests.invariants import chunks
from tests.unit.test_pydantic_ai import QUESTION, STEPS, conversation
from tests.unit.test_pydantic_ai_stream import response_texts

pytestmark = pytest.mark.e2e

KILL_AFTER = "pai:tool:read_page:call_2_read_page"
FINAL = "pai:model:3"
# ~1 s an answer of some 45 words: the first batch of its chunks is written mid-answer.
CHUNK_MS = "20"


def start_fake_model(stack: Stack, *options: str) -> str:
    """``python -m app.tools.fakemodel`` on a free port (with ``options``): its base URL
    (ending in /v1)."""
    return stack.start_fake_model(name=f"fakemodel-{len(stack.procs)}", options=options)


def model_requests(model_url: str) -> list[dict[str, Any]]:
    """The requests the fake model answered, in order."""
    got: list[dict[str, Any]] = httpx.get(f"{model_url}/requests", timeout=10).json()["requests"]
    return got


def logged_tool_calls(tools_log: Path) -> list[dict[str, Any]]:
    """The tool calls every process logged (the examples' ``<PREFIX>TOOL_LOG``)."""
    lines = tools_log.read_text().splitlines() if tools_log.exists() else []
    return [json.loads(line) for line in lines]


def stream_matches_records(client: httpx.Client, job_id: str, texts: dict[str, str]) -> None:
    """The job's stream, read through the API, holds each model step's recorded text
    (``texts``, by step key) once: its chunks seq 0, 1, ... with no gap, none twice."""
    by_key: dict[str, list[dict[str, Any]]] = {}
    for chunk in streamed_chunks(client, job_id):
        by_key.setdefault(chunk["key"], []).append(chunk)
    for key, got in by_key.items():
        assert [c["seq"] for c in got] == list(range(len(got))), f"{key}: a gap or a repeat"
    assert {k: "".join(c["text"] for c in got) for k, got in by_key.items()} == texts


def finished(client: httpx.Client, job_id: str) -> dict[str, Any]:
    def done() -> dict[str, Any] | None:
        job: dict[str, Any] = client.get(f"/v1/jobs/{job_id}").json()
        return job if job["state"] in ("succeeded", "dead_lettered") else None

    job = wait_for(done, what=f"job {job_id} to finish", timeout=90)
    assert job["state"] == "succeeded", job
    return job


def test_an_agent_killed_after_a_tool_call_then_mid_answer_repeats_no_step_nor_chunk(
    stack: Stack, sql: Any
) -> None:
    stack.logs_dir.mkdir(parents=True, exist_ok=True)
    model_url = start_fake_model(stack, "--chunk-ms", CHUNK_MS)
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

        # The next worker takes the job once its message is visible again, and dies once
        # the first batch of the final answer's chunks is written.
        rescuer = stack.worker(env=crash_env(Point.INSIDE_STREAM))
        died_by_sigkill(rescuer, "the worker armed inside the answer's stream")
        at_death = chunks(sql, job_id)
        assert at_death and [c["seq"] for c in at_death] == list(range(len(at_death)))

        stack.worker()
        job = finished(client, job_id)
        effects = client.get(f"/v1/jobs/{job_id}/effects").json()
        recorded = {e["key"]: e["result"] for e in effects}
        stream_matches_records(client, job_id, response_texts(recorded))
        crashed_requests, crashed_tools = requests(), tool_calls()

        # The same question, uninterrupted, on the healthy worker.
        calm_id = client.post(
            "/v1/jobs", json={"kind": "examples.research", "payload": QUESTION}
        ).json()["id"]
        calm = finished(client, calm_id)
        stream_matches_records(client, calm_id, {FINAL: calm["result"]["answer"]})
        usage = client.get("/v1/usage").json()

    # The answer went on from the chunks written before the kill: none twice, none lost.
    final = chunks(sql, job_id)
    assert final[: len(at_death)] == at_death and len(final) > len(at_death)
    assert "".join(c["text"] for c in final) == job["result"]["answer"]
    # No request and no tool call repeated but the answer the kill cut (never recorded).
    answers = ["tool:search", "tool:read_page", "tool:save_note", "text", "text"]
    assert [r["answer"] for r in crashed_requests] == answers
    assert len({r["digest"] for r in crashed_requests}) == 4
    assert [c["tool"] for c in crashed_tools] == ["search", "read_page", "save_note"]
    assert [c["pid"] for c in crashed_tools] == [doomed.pid, doomed.pid, rescuer.pid]
    # The steps each killed attempt recorded are its own; the answer attempt 3's.
    assert [e["key"] for e in effects] == STEPS
    split = STEPS.index(KILL_AFTER) + 1
    assert [e["attempt"] for e in effects] == [1] * split + [2] * (len(STEPS) - split - 1) + [3]
    assert job["attempt"] == 3 and calm["attempt"] == 1
    # The answer and the conversation equal the uninterrupted run's.
    assert job["result"]["answer"] == calm["result"]["answer"]
    assert conversation(job["result"]["messages"]) == conversation(calm["result"]["messages"])
    # Every model request's tokens are the tenant's usage: 4 calls a job, none twice.
    rows = [r for r in usage["rows"] if r["kind"] == "examples.research"]
    assert [(r["model"], r["calls"]) for r in rows] == [("fake-model", 8)]
