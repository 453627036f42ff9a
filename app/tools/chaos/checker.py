"""The invariant checker (docs/explain/design.md#invariants), used by ``tasklease chaos`` and by the
tests (tests/invariants.py): pure functions from the witnesses (the store's rows, the
fake model's call log, the webhook's deliveries) to what was violated.

``check`` is Jepsen's queue checker over a whole chaos run; ``job_violations`` checks
one job's row, timeline and effects, as the crash-point tests do after each fault.
"""

from __future__ import annotations

import datetime as dt
from collections import Counter, defaultdict
from collections.abc import Mapping, Sequence
from typing import Any

from app.states import JobState
from app.tools.chaos.per_agent import agent_check
from app.tools.chaos.per_job import ON_ITS_WAY, Outside, delivery_violations, job_violations
from app.tools.chaos.per_key import Outage, key_check
from app.tools.chaos.per_kind import (
    FINAL,
    TRIAGE,
    World,
    cause,
    kind_oddities,
    odd_of_kind,
    ref_of_job,
    stuck_wait,
    wait_stats,
)
from app.tools.chaos.per_message import issue32_check
from app.tools.chaos.per_version import version_check
from app.tools.chaos.repeats import delivery_repeats, model_call_stats, throttle_counts, when


def check(
    *,
    submitted: int,
    acked: dict[str, str],
    tags: dict[str, str],
    redriven: list[str],
    jobs: list[dict[str, Any]],
    events: list[dict[str, Any]],
    effects: list[dict[str, Any]],
    duplicated_effect_rows: int,
    model_calls: list[dict[str, Any]],
    deliveries: list[dict[str, Any]],
    kills: list[dict[str, Any]],
    callbacks: Sequence[Mapping[str, Any]] = (),
    chunks: Sequence[Mapping[str, Any]] = (),
    agent_requests: Sequence[Mapping[str, Any]] = (),
    agent_results: Mapping[str, Any] | None = None,
    plans: Mapping[str, str] | None = None,
    answers: Mapping[str, Mapping[str, Any]] | None = None,
    now: dt.datetime | None = None,
    grace: float = 0.0,
    delay_cap: float | None = None,
    messages: Mapping[str, Sequence[Mapping[str, Any]]] | None = None,
    sent: Mapping[str, Mapping[str, Any]] | None = None,
    views: Mapping[str, Mapping[str, Any]] | None = None,
    deadline_refs: Sequence[str] = (),
    past_deadline: Sequence[Any] = (),
    running_cap: int | None = None,
    key_bound: float = 5.0,
    outages: Sequence[Outage] = (),
    keyed_submitted: bool = False,
) -> dict[str, Any]:
    """Jepsen's queue checker, for tasklease's invariants. Pure: facts in, report out.

    Every job is checked, the submitted ones and the children they spawned: none lost
    (finished, or waiting for a condition not met yet), none completed twice, no effect
    twice, no wait left stuck (its callback answered, its gather decided or its time
    overdue by more than ``grace`` seconds at ``now``), and what each kind should have
    done, done (``plans``: ref -> what the harness did with an approval; ``answers``:
    what its answers met; ``agent_results``: ref -> what an uninterrupted run of an agent
    job gives, ``agent_requests``: the agent model's log, per_agent.py; the messages,
    published state and deadlines, per_message.py; the deployed kind's jobs,
    per_version.py; the keyed jobs against ``running_cap``, ``key_bound`` and the run's
    ``outages``, per_key.py: with ``keyed_submitted``, a run that never tested the key's
    limit or the debounce fails). Past a screen
    on purpose: index, one pass and report read best as one."""
    plans, answers = plans or {}, answers or {}
    by_id = {j["id"]: j for j in jobs}
    ref_of = {job_id: ref for ref, job_id in acked.items()}
    events_of: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for e in events:
        events_of[e["job_id"]].append(e)
    effects_of: dict[str, dict[str, dict[str, Any]]] = defaultdict(dict)
    for f in effects:
        effects_of[f["job_id"]][f["key"]] = f
    calls_of: dict[str, Counter[str]] = defaultdict(Counter)
    for c in model_calls:
        calls_of[str(c["key"])][str(c["outcome"])] += 1
    delivered: dict[str, list[dt.datetime]] = defaultdict(list)
    for d in deliveries:
        delivered[str(d["idempotency_key"])].append(when(d["at"]))
    callbacks_of: dict[str, dict[str, Mapping[str, Any]]] = defaultdict(dict)
    for cb in callbacks:
        callbacks_of[str(cb["job_id"])][str(cb["key"])] = cb
    children_of: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for j in jobs:
        if j.get("parent_id"):
            children_of[j["parent_id"]].append(j)
    chunks_of: dict[str, list[tuple[int, str]]] = defaultdict(list)
    for ch in chunks:
        chunks_of[f"{ch['job_id']}:{ch['key']}"].append((int(ch["seq"]), str(ch["text"])))
    world = World(by_id, effects_of, events_of, callbacks_of, children_of, set(redriven), chunks_of)

    states: Counter[str] = Counter()
    by_kind: dict[str, Counter[str]] = defaultdict(Counter)
    lost: list[dict[str, Any]] = []
    stuck: list[dict[str, Any]] = []
    unexpected: list[dict[str, str]] = []

    def odd(job_id: str, why: str) -> None:
        unexpected.append({"job_id": job_id, "ref": ref_of_job(job_id, ref_of, by_id), "why": why})

    for job_id in acked.values():
        if job_id not in by_id:
            lost.append({"job_id": job_id, "state": None})
    for job in jobs:
        job_id, state = job["id"], job["state"]
        kind = job.get("kind") or TRIAGE
        by_kind[kind + (" (child)" if job.get("parent_id") else "")][state] += 1
        if job_id in ref_of:
            states[state] += 1
        elif not job.get("parent_id"):
            odd(job_id, "in the store, but neither acknowledged to a client nor spawned")
        if state not in {s.value for s in JobState}:
            odd(job_id, f"unknown state {state!r}")
        elif state == JobState.WAITING:
            why = stuck_wait(job, world, now, grace)
            if why:
                stuck.append({"job_id": job_id, "why": why})
        elif state not in FINAL:
            lost.append({"job_id": job_id, "state": state})
        ref = ref_of.get(job_id, "")
        found = kind_oddities(job, world) + odd_of_kind(
            job, world, tags.get(ref, ""), plans.get(ref, ""), answers.get(ref), delivered, calls_of
        )
        for why in found:
            odd(job_id, why)

    agents, agent_findings = agent_check(
        jobs=jobs,
        effects=effects,
        effects_of=effects_of,
        events_of=events_of,
        delivered=delivered,
        requests=agent_requests,
        kills=kills,
        expected={acked[r]: v for r, v in (agent_results or {}).items() if r in acked},
    )
    talk, talk_findings = issue32_check(
        jobs, acked, messages or {}, sent or {}, views or {}, deadline_refs, past_deadline
    )
    versions, version_findings = version_check(jobs, effects_of)
    keys, key_findings = key_check(
        jobs,
        events_of,
        all_events=events,
        cap=running_cap,
        bound=key_bound,
        outages=outages,
        require=keyed_submitted,
    )
    for job_id, why in [*agent_findings, *talk_findings, *version_findings, *key_findings]:
        odd(job_id, why)

    completions = Counter(e["job_id"] for e in events if e["to_state"] == JobState.SUCCEEDED)
    duplicated_completions = sorted(j for j, n in completions.items() if n > 1)

    window, duplicated, window_causes, duplicated_keys = delivery_repeats(
        delivered, effects_of, events_of, kills
    )
    succeeded = [
        j
        for j in acked.values()
        if by_id.get(j, {}).get("state") == JobState.SUCCEEDED
        and by_id[j].get("kind", TRIAGE) == TRIAGE
    ]
    report: dict[str, Any] = {
        "submitted": submitted,
        "acknowledged": len(acked),
        "succeeded": states[JobState.SUCCEEDED],
        "dead_lettered": states[JobState.DEAD_LETTERED],
        "cancelled": states[JobState.CANCELLED],
        "waiting": states[JobState.WAITING],
        "lost": len(lost),
        "duplicated_effects": duplicated_effect_rows + duplicated,
        "duplicated_completions": len(duplicated_completions),
        "stuck_waits": len(stuck),
        "unexpected": len(unexpected),
        "effect_window_repeats": window,
        "duplicated_effect_rows": duplicated_effect_rows,
        "duplicated_deliveries": duplicated,
        "redriven": len(redriven),
        "waits": wait_stats(jobs, events, effects, callbacks, answers, delay_cap),
        "agents": agents,
        "messages_and_deadlines": talk,
        "versions": versions,
        "keys": keys,
        "by_kind": {k: dict(v) for k, v in sorted(by_kind.items())},
        "model_calls": model_call_stats(model_calls, calls_of, succeeded, kills),
        "throttles": throttle_counts(model_calls, events),
        "effect_window_repeats_by_cause": dict(window_causes),
        "dead_lettered_by_cause": dict(
            Counter(cause(j["last_error"]) for j in jobs if j["state"] == JobState.DEAD_LETTERED)
        ),
        "lost_jobs": lost[:50],
        "stuck_wait_jobs": stuck[:50],
        "unexpected_jobs": unexpected[:50],
        "duplicated_completion_jobs": duplicated_completions[:50],
        "duplicated_delivery_keys": duplicated_keys[:50],
    }
    return report


def violated(report: dict[str, Any]) -> bool:
    keys = ("lost", "duplicated_effects", "duplicated_completions", "stuck_waits", "unexpected")
    retention = (report.get("retention") or {}).get("problems")
    untested = (report.get("keys") or {}).get("problems")
    return (
        any(report.get(k) for k in keys)
        or bool(retention)
        or bool(untested)
        or report["acknowledged"] < report["submitted"]
    )


# One job at a time (per_job.py), where its callers have always found it.
__all__ = [
    "ON_ITS_WAY",
    "TRIAGE",
    "Outside",
    "check",
    "delivery_violations",
    "job_violations",
    "violated",
]
