"""The chaos checker's look at the agent jobs (demo.agent: a Pydantic AI agent run by
tasklease.pydantic_ai, key ``pai``; demo.openai_agent: an OpenAI Agents SDK agent run by
tasklease.openai_agents, key ``oai``; every model request ``<key>:model:<n>`` and every
tool call ``<key>:tool:<name>:<call id>`` a step). For each one:

- succeeded, its result equals what an uninterrupted run of its question gives (the
  harness ran each question once, in memory, against a fake model of its own: the fake
  is deterministic), and it recorded every step that run has;
- no tool call applied more than once (the webhook's deliveries under the step's
  Idempotency-Key) but in the documented effect window (``classify_repeats``: a
  delivery by an attempt that never recorded the step, one per attempt); a recorded
  tool call applied at least once;
- no model step recorded twice under one key (the effects' rows), and no model request
  sent again (the fake model's log, by the job's header and the request's turn) but in
  that same window.

``agent_check`` gives the report's ``agents`` counts and each job's findings."""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections import Counter, defaultdict
from collections.abc import Mapping, Sequence
from typing import Any

from app.demos import agent as demo_agent
from app.states import JobState
from app.tools.chaos.repeats import classify_repeats, when

AGENT_KINDS = {  # kind -> its steps' key prefix
    demo_agent.KIND: demo_agent.KEY,
    demo_agent.OPENAI_KIND: demo_agent.OPENAI_KEY,
}
Row = Mapping[str, Any]
# The report's counts (every one shown, zero or not).
COUNTS = (
    "jobs",
    "succeeded",
    "equal_to_an_uninterrupted_run",
    "tool_calls_recorded",
    "tool_calls_made",  # applied: delivered to the webhook
    "tool_calls_repeats_in_window",
    "tool_calls_made_again",  # outside the window
    "model_steps_recorded",
    "model_requests_made",  # answered (not a 429) by the fake model
    "model_requests_repeats_in_window",
    "model_requests_made_again",  # outside the window
    "steps_recorded_twice",
    "requests_throttled",
)


def agent_check(
    *,
    jobs: Sequence[Row],
    effects: Sequence[Row],
    effects_of: Mapping[str, Mapping[str, Row]],
    events_of: Mapping[str, Sequence[Row]],
    delivered: Mapping[str, list[dt.datetime]],
    requests: Sequence[Row],
    kills: list[dict[str, Any]],
    expected: Mapping[str, Any],
) -> tuple[dict[str, Any], list[tuple[str, str]]]:
    """(the counts, [(job id, what is wrong)]) over every agent job; ``requests``: the
    agent model's log, ``expected``: job id -> an uninterrupted run's result."""
    agents = {str(j["id"]): j for j in jobs if j.get("kind") in AGENT_KINDS}
    rows = Counter((str(f["job_id"]), str(f["key"])) for f in effects if f["job_id"] in agents)
    sent: dict[str, dict[int, list[dt.datetime]]] = defaultdict(lambda: defaultdict(list))
    throttled = 0
    for r in requests:
        if r.get("job") not in agents:
            continue
        if r.get("answer") == "429":
            throttled += 1
        else:
            sent[str(r["job"])][int(r["turn"])].append(when(r["at"]))
    applied: dict[str, dict[str, list[dt.datetime]]] = defaultdict(dict)
    for key, times in delivered.items():
        job_id, _, step = key.partition(":")
        if job_id in agents:
            applied[job_id][step] = times
    counts: Counter[str] = Counter(dict.fromkeys(COUNTS, 0))
    counts.update(jobs=len(agents), requests_throttled=throttled)
    found: list[tuple[str, str]] = []
    for job_id, job in agents.items():
        prefix = AGENT_KINDS[str(job["kind"])]
        fx = effects_of.get(job_id, {})
        seen = _Job(fx, [dict(e) for e in events_of.get(job_id, [])], kills, counts)
        whys = _tool_calls(prefix, applied[job_id], seen)
        whys += _model_requests(prefix, sent[job_id], seen)
        twice = sorted(k for (j, k), n in rows.items() if j == job_id and n > 1)
        counts["steps_recorded_twice"] += len(twice)
        whys += [f"step {k!r} recorded {rows[(job_id, k)]} times" for k in twice]
        whys += _result(job, prefix, fx, expected.get(job_id), counts)
        found += [(job_id, why) for why in whys]
    return dict(counts), found


@dataclasses.dataclass(frozen=True)
class _Job:
    """One agent job's witnesses, and the counts its checks add to."""

    fx: Mapping[str, Row]  # its effects by key
    events: list[dict[str, Any]]
    kills: list[dict[str, Any]]
    counts: Counter[str]


def _repeated(what: str, made: Mapping[str, list[dt.datetime]], job: _Job) -> list[str]:
    """Each step's outside calls (``made``: step key -> when): their repeats in the
    effect window and outside it, counted under ``<what>_*``; those outside, found."""
    found = []
    for step, times in sorted(made.items()):
        recorded = job.fx.get(step)
        attempt = recorded["attempt"] if recorded else None
        window, outside, _ = classify_repeats(sorted(times), job.events, attempt, job.kills)
        job.counts[f"{what}_made"] += len(times)
        job.counts[f"{what}_repeats_in_window"] += window
        job.counts[f"{what}_made_again"] += outside
        if outside:
            found.append(f"{step!r} called {len(times)} times, {outside} outside the effect window")
    return found


def _tool_calls(prefix: str, applied: Mapping[str, list[dt.datetime]], job: _Job) -> list[str]:
    """The tool calls applied (the webhook's deliveries), and each recorded one applied."""
    found = _repeated("tool_calls", applied, job)
    for step in sorted(k for k in job.fx if k.startswith(f"{prefix}:tool:")):
        job.counts["tool_calls_recorded"] += 1
        if not applied.get(step):
            found.append(f"tool call {step!r} recorded, but the webhook never got it")
    return found


def _model_requests(prefix: str, sent: Mapping[int, list[dt.datetime]], job: _Job) -> list[str]:
    """The model requests answered (the fake model's log: turn n is step model:n)."""
    made = {f"{prefix}:model:{turn}": times for turn, times in sent.items()}
    job.counts["model_steps_recorded"] += sum(1 for k in job.fx if k.startswith(f"{prefix}:model:"))
    return _repeated("model_requests", made, job)


def _result(
    job: Row, prefix: str, fx: Mapping[str, Row], expected: Any, counts: Counter[str]
) -> list[str]:
    """A succeeded agent job: the uninterrupted run's result, and every step it has."""
    if job["state"] != JobState.SUCCEEDED:
        return []
    counts["succeeded"] += 1
    if expected is None:
        return ["succeeded, but the harness has no uninterrupted run of its question"]
    if job["result"] != expected:
        return [f"its result {job['result']} is not an uninterrupted run's {expected}"]
    counts["equal_to_an_uninterrupted_run"] += 1
    models = sorted(k for k in fx if k.startswith(f"{prefix}:model:"))
    tools = [k.split(":")[2] for k in fx if k.startswith(f"{prefix}:tool:")]
    found = []
    if len(models) != expected["requests"]:
        found.append(f"its steps {sorted(fx)} are not {expected['requests']} model requests")
    if sorted(tools) != sorted(expected["tools"]):
        found.append(f"its tool calls recorded are {sorted(tools)}, not {expected['tools']}")
    return found
