"""The chaos checker on agent jobs (demo.agent, app/tools/chaos/per_agent.py): the gate
must fail on a result that is not an uninterrupted run's, a tool call applied twice, a
model step recorded twice or a model request sent again, and pass the documented effect
window (a killed attempt's outside call, made again by the next). Pure: facts in,
report out."""

from __future__ import annotations

from typing import Any

import pytest

from app.tools.chaos.checker import check, violated
from app.tools.chaos.report import render
from tests.unit.test_chaos_checker import at, effect, job
from tests.unit.test_cli_render import chaos_report, text

pytestmark = pytest.mark.unit

TOOLS = ["look_up", "file_note", "notify"]
# A run's steps in order: the start, then each model request and the tool call it asks.
STEPS = ["pai:start", "pai:model:0"]
for n, name in enumerate(TOOLS):
    STEPS += [f"pai:tool:{name}:call_{n + 1}_{name}", f"pai:model:{n + 1}"]
RESULT = {"answer": "Answer to 'q'.", "tools": TOOLS, "requests": 4}


def timeline(job_id: str, runs: list[tuple[int, str, float]]) -> list[dict[str, Any]]:
    """Each run (attempt, worker, start in s): leased and running; then succeeded at 60 s."""
    steps: list[tuple[float, str, int, str | None]] = [(0, "queued", 0, None)]
    for attempt, worker, start in runs:
        steps += [(start, "leased", attempt, worker), (start + 0.1, "running", attempt, worker)]
    steps.append((60, "succeeded", *runs[-1][:2]))
    return [
        {
            "job_id": job_id,
            "at": at(t),
            "from_state": steps[i - 1][1] if i else None,
            "to_state": state,
            "attempt": attempt,
            "worker": worker,
        }
        for i, (t, state, attempt, worker) in enumerate(steps)
    ]


def witness(starts: tuple[float, ...] = (10,) * len(STEPS)) -> dict[str, Any]:
    """One agent job run once without a fault: 4 model requests, 3 tool calls applied.
    Step i is called at ``starts[i] + i`` s and recorded half a second later."""
    effects = [effect("a", k, None, starts[i] + i + 0.5) for i, k in enumerate(STEPS)]
    return {
        "submitted": 1,
        "acked": {"A-0": "a"},
        "tags": {},
        "redriven": [],
        "jobs": [job("a", "demo.agent", payload={"question": "q"}, result=RESULT)],
        "events": timeline("a", [(1, "w1", 5)]),
        "effects": effects,
        "duplicated_effect_rows": 0,
        "model_calls": [],
        "deliveries": [
            {"idempotency_key": f"a:{k}", "at": at(starts[i] + i).isoformat()}
            for i, k in enumerate(STEPS)
            if ":tool:" in k
        ],
        "kills": [],
        "agent_requests": [
            {"job": "a", "turn": int(k[-1]), "answer": "x", "at": at(starts[i] + i).isoformat()}
            for i, k in enumerate(STEPS)
            if ":model:" in k
        ],
        "agent_results": {"A-0": RESULT},
    }


def whys(report: dict[str, Any]) -> list[str]:
    return [u["why"] for u in report["unexpected_jobs"]]


def openai_agent(f: dict[str, Any]) -> dict[str, Any]:
    """The same witness, of a demo.openai_agent job (its steps' keys ``oai:...``)."""
    f["jobs"][0]["kind"] = "demo.openai_agent"
    for e in f["effects"]:
        e["key"] = e["key"].replace("pai:", "oai:")
    for d in f["deliveries"]:
        d["idempotency_key"] = d["idempotency_key"].replace(":pai:", ":oai:")
    return f


@pytest.mark.parametrize("framework", [lambda f: f, openai_agent], ids=["pydantic_ai", "openai"])
def test_an_agent_job_as_an_uninterrupted_run_is_valid(framework: Any) -> None:
    report = check(**framework(witness()))
    assert whys(report) == []
    assert not violated(report)
    agents = report["agents"]
    assert agents["equal_to_an_uninterrupted_run"] == agents["succeeded"] == 1
    assert (agents["tool_calls_recorded"], agents["tool_calls_made"]) == (3, 3)
    assert (agents["model_steps_recorded"], agents["model_requests_made"]) == (4, 4)
    assert agents["tool_calls_made_again"] == agents["model_requests_made_again"] == 0


def test_a_result_other_than_an_uninterrupted_run_s_fails_the_gate() -> None:
    f = witness()
    f["jobs"][0]["result"] = {**RESULT, "answer": "Answer to 'q'. From the tools: none."}
    report = check(**f)
    assert violated(report)
    assert any("is not an uninterrupted run's" in w for w in whys(report)), whys(report)
    assert report["agents"]["equal_to_an_uninterrupted_run"] == 0


def test_a_tool_call_applied_twice_by_one_attempt_fails_the_gate() -> None:
    f = witness()
    f["deliveries"].append({"idempotency_key": f"a:{STEPS[4]}", "at": at(30).isoformat()})
    report = check(**f)
    assert violated(report)
    assert report["agents"]["tool_calls_made_again"] == 1
    assert report["duplicated_effects"] == 1
    assert any(f"{STEPS[4]!r} called 2 times" in w for w in whys(report))


def test_a_tool_call_applied_again_after_a_kill_inside_it_is_the_documented_window() -> None:
    # Attempt 1 (w1, from 5 s) recorded the steps before file_note, applied it at 14 s
    # and was killed before recording it; attempt 2 (w2, from 20 s) replayed those,
    # applied file_note again and recorded it, with the rest.
    f = witness(starts=(10, 10, 10, 10, 20, 20, 20, 20))
    f["events"] = timeline("a", [(1, "w1", 5), (2, "w2", 20)])
    f["kills"] = [{"worker": "w1", "pid": 1, "at": at(14.2).isoformat()}]
    for e in f["effects"][4:]:
        e["attempt"] = 2
    f["deliveries"].append({"idempotency_key": f"a:{STEPS[4]}", "at": at(14).isoformat()})
    f["jobs"][0]["attempt"] = 2
    report = check(**f)
    assert whys(report) == []
    assert not violated(report)
    assert report["agents"]["tool_calls_repeats_in_window"] == 1
    assert report["effect_window_repeats_by_cause"] == {"worker killed": 1}


def test_a_model_step_recorded_twice_fails_the_gate() -> None:
    f = openai_agent(witness())
    f["effects"].append(effect("a", "oai:model:2", None, 40))
    report = check(**f)
    assert violated(report)
    assert report["agents"]["steps_recorded_twice"] == 1
    assert "step 'oai:model:2' recorded 2 times" in whys(report)


def test_a_model_request_sent_again_by_the_attempt_that_recorded_it_fails_the_gate() -> None:
    f = witness()
    f["agent_requests"].append({"job": "a", "turn": 1, "answer": "x", "at": at(40).isoformat()})
    f["agent_requests"].append({"job": "a", "turn": 2, "answer": "429", "at": at(41).isoformat()})
    report = check(**f)
    assert violated(report)
    assert report["agents"]["model_requests_made_again"] == 1
    assert report["agents"]["requests_throttled"] == 1  # a 429 is no repeat
    assert any("'pai:model:1' called 2 times" in w for w in whys(report))


def test_the_report_shows_the_agent_jobs_counts() -> None:
    f = witness()
    f["agent_requests"].append({"job": "a", "turn": 1, "answer": "x", "at": at(40).isoformat()})
    report = {**chaos_report("x"), "agents": check(**f)["agents"]}
    rows = {
        cells[1].strip(): cells[2].strip()
        for line in text(render(report)).splitlines()
        if len(cells := line.split("│")) == 4
    }
    assert rows["agent jobs: succeeded / equal to an uninterrupted run"] == "1: 1 / 1"
    model = "agent model requests: recorded / answered / again in the window / again outside"
    assert rows[model] == "4 / 5 / 0 / 1"
