"""A worker SIGKILLed in the middle of a streamed model answer (the inside_stream crash
point: a batch of chunks is written, the answer not finished) and a second worker that
finishes it: the answer is continued from the recorded chunks, not started over, and the
stream reads as one continuous text with no chunk repeated or lost."""

from __future__ import annotations

from typing import Any

import pytest

from app.crashpoints import Point
from app.demos.triage.writing import fake_text
from app.states import JobState
from tests.conftest import Stack
from tests.e2e.test_auth_cli import cli
from tests.e2e.test_crash_points import died_by_sigkill, submit
from tests.helpers import crash_env
from tests.invariants import chunks, describe, wait_for_state

pytestmark = pytest.mark.e2e

PROMPT = "Explain leases to a new engineer"
WORDS = 40
SLOW = {"TASKLEASE_FAKE_MODEL_CHUNK_MS": "30"}  # ~1.2 s an answer: the first batch kills


def streamed_chunks(api: Any, job_id: str) -> list[dict[str, Any]]:
    """The job's chunk events read through GET /v1/jobs/{id}/stream?after= pages."""
    after, got = "0", []
    for _ in range(100):
        # wait 1, not 0: rows a transaction elsewhere on the server holds back come within it
        resp = api.get(f"/v1/jobs/{job_id}/stream", params={"after": after, "wait": 1})
        assert resp.status_code == 200, resp.text
        page = resp.json()
        got += [e["data"] for e in page["events"] if e["type"] == "chunk"]
        after = page["next"]
        if page["done"]:
            return got
    pytest.fail("the job's stream never said done")


@pytest.mark.asyncio
async def test_a_worker_killed_mid_stream_leaves_the_next_to_continue_the_text(
    stack: Stack, sql: Any, api: Any
) -> None:
    # Given a worker armed to die once a batch of a streamed answer's chunks is written.
    doomed = stack.worker(env={**crash_env(Point.INSIDE_STREAM), **SLOW}, name="doomed")
    job_id = await submit(stack, "demo.write", {"prompt": PROMPT, "words": WORDS}, tenant="acme")
    # When it dies there, some chunks are recorded and the answer is not.
    died_by_sigkill(doomed, "the worker armed at inside_stream")
    at_death = chunks(sql, job_id)
    assert 0 < len(at_death) < WORDS, describe(sql, job_id)
    assert [c["seq"] for c in at_death] == list(range(len(at_death)))
    partial = "".join(c["text"] for c in at_death)

    # Then a second worker finishes it, continuing from what was recorded.
    stack.worker(env=SLOW, name="rescuer")
    row = wait_for_state(sql, job_id, JobState.SUCCEEDED, timeout=60)
    calls = [c for c in stack.model_calls() if c["key"] == f"{job_id}:answer"]
    assert [c["partial"] for c in calls] == [0, len(partial)], calls

    text = fake_text(PROMPT, WORDS)
    final = chunks(sql, job_id)
    assert [c["seq"] for c in final] == list(range(len(final))), "a gap or a repeat"
    assert final[: len(at_death)] == at_death
    assert "".join(c["text"] for c in final) == text
    effect = sql.execute(
        "SELECT result, model, input_tokens, output_tokens FROM effects "
        "WHERE job_id = %s AND key = 'answer'",
        (job_id,),
    ).fetchone()
    assert effect["result"]["text"] == text == row["result"]["text"]
    assert effect["model"] == "fake-writer-1"
    assert effect["output_tokens"] == len(text[len(partial) :].split())

    # And a reader of the stream sees the same continuous text, each chunk once.
    read = streamed_chunks(api, job_id)
    assert [c["seq"] for c in read] == list(range(len(final)))
    assert "".join(c["text"] for c in read) == text

    # And `tasklease jobs show` prints the two calls' tokens as one model effect.
    code, out, err = cli(stack, "jobs", "show", job_id)
    assert code == 0, err
    tokens_in = len(PROMPT.split()) + len(partial.split())
    assert f"Model usage: {tokens_in} input + {effect['output_tokens']} output tokens" in out
    assert "fake-writer-1 x1" in out
