"""The invariant checker (DESIGN.md "Invariants"), used by ``tasklease chaos`` and by the
tests (tests/invariants.py): pure functions from the witnesses (the store's rows, the
fake model's call log, the webhook's deliveries) to what was violated.

``check`` is Jepsen's queue checker over a whole chaos run; ``job_violations`` checks
one job's row, timeline and effects, as the crash-point tests do after each fault.
"""

from __future__ import annotations

import datetime as dt
from collections import Counter, defaultdict
from typing import Any

from app.states import FINAL_FOR_NOW, JobState

FINAL = tuple(s.value for s in FINAL_FOR_NOW)


def cause(last_error: str | None) -> str:
    text = last_error or ""
    if text.startswith("permanent:"):
        return "permanent (tag)" if "[permanent] tag" in text else "permanent (injected)"
    if text.startswith("worker never finished"):
        return "worker never finished"
    if text.startswith("attempts used up"):
        return "attempts used up"
    return "other"


def _ts(value: Any) -> dt.datetime:
    return value if isinstance(value, dt.datetime) else dt.datetime.fromisoformat(str(value))


def classify_repeats(
    deliveries: list[dt.datetime],
    events: list[dict[str, Any]],
    recorded_attempt: int | None,
    kills: list[dict[str, Any]],
) -> tuple[int, int, Counter[str]]:
    """Split one webhook key's extra deliveries into effect-window repeats and duplicates.

    Each attempt runs from its ``running`` event to the job's next event. A delivery
    made by an attempt that never recorded the effect, one per attempt and with no
    other attempt running at the same time, is DESIGN.md's documented window (the
    outside call happened, the insert did not). Anything else is a duplicate.
    """
    extra = len(deliveries) - 1
    if extra <= 0:
        return 0, 0, Counter()
    spans = []
    for i, e in enumerate(events):
        if e["to_state"] != JobState.RUNNING:
            continue
        end = (
            _ts(events[i + 1]["at"])
            if i + 1 < len(events)
            else dt.datetime.max.replace(tzinfo=dt.UTC)
        )
        spans.append((_ts(e["at"]), end, e["attempt"], e["worker"]))
    per_span: Counter[int] = Counter()
    for t in deliveries:
        hit = [k for k, (a, b, _, _) in enumerate(spans) if a <= t < b]
        per_span[hit[0] if hit else -1] += 1
    if per_span[-1] or any(n > 1 for n in per_span.values()):
        return 0, extra, Counter()
    causes: Counter[str] = Counter()
    for k, n in per_span.items():
        start, end, attempt, worker = spans[k]
        if n == 1 and attempt != recorded_attempt:
            killed = any(x["worker"] == worker and start <= _ts(x["at"]) <= end for x in kills)
            causes["worker killed" if killed else "attempt cut short otherwise"] += 1
    window = min(extra, sum(causes.values()))
    return window, extra - window, causes


def model_repeats(
    model_calls: list[dict[str, Any]], kills: list[dict[str, Any]]
) -> tuple[int, int]:
    """Extra successful model calls per key: (made by a process killed right after, other)."""
    killed_at = {int(k["pid"]): _ts(k["at"]) for k in kills}
    ok: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for c in model_calls:
        if c["outcome"] == "ok":
            ok[str(c["key"])].append(c)
    window = other = 0
    for calls in ok.values():
        for c in sorted(calls, key=lambda c: _ts(c["at"]))[:-1]:
            death = killed_at.get(int(c["pid"]))
            if death is not None and death >= _ts(c["at"]):
                window += 1
            else:
                other += 1
    return window, other


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
) -> dict[str, Any]:
    """Jepsen's queue checker, for tasklease's invariants. Pure: facts in, report out."""
    by_id = {j["id"]: j for j in jobs}
    ticket_of = {job_id: tid for tid, job_id in acked.items()}
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
        delivered[str(d["idempotency_key"])].append(_ts(d["at"]))

    states: Counter[str] = Counter()
    lost: list[dict[str, Any]] = []
    unexpected: list[dict[str, str]] = []

    def odd(job_id: str, why: str) -> None:
        unexpected.append({"job_id": job_id, "ticket": ticket_of.get(job_id, "?"), "why": why})

    for job_id in acked.values():
        job = by_id.get(job_id)
        if job is None:
            lost.append({"job_id": job_id, "state": None})
            continue
        state = job["state"]
        states[state] += 1
        tag = tags.get(ticket_of.get(job_id, ""), "")
        if state not in {s.value for s in JobState}:
            odd(job_id, f"unknown state {state!r}")
        elif state not in FINAL:
            lost.append({"job_id": job_id, "state": state})
        if state == JobState.SUCCEEDED:
            fx = effects_of.get(job_id, {})
            if set(fx) != {"triage", "post"}:
                odd(job_id, f"succeeded with effects {sorted(fx)}")
            if not (job["result"] or {}).get("delivered"):
                odd(job_id, "succeeded but its result says the reply was not delivered")
            if not delivered.get(f"{job_id}:post"):
                odd(job_id, "succeeded but the webhook never received its reply")
            if not calls_of[f"{job_id}:triage"]["ok"]:
                odd(job_id, "succeeded with no successful model call in the call log")
            if tag == "[permanent]":
                odd(job_id, "tagged [permanent] but succeeded")
        elif state == JobState.DEAD_LETTERED and cause(job["last_error"]) not in (
            "permanent (tag)",
            "permanent (injected)",
        ):
            odd(
                job_id,
                f"still dead-lettered after a redrive with the cause gone: {job['last_error']}",
            )
        elif state == JobState.CANCELLED:
            odd(job_id, "cancelled, and nobody cancelled it")
        segment_attempts: set[int] = set()
        for e in events_of.get(job_id, []):
            if e["from_state"] == JobState.DEAD_LETTERED:
                segment_attempts = set()
            if e["to_state"] == JobState.RUNNING:
                segment_attempts.add(e["attempt"])
                if len(segment_attempts) > job["max_attempts"]:
                    odd(job_id, f"ran more attempts than its budget of {job['max_attempts']}")
                    break

    completions = Counter(e["job_id"] for e in events if e["to_state"] == JobState.SUCCEEDED)
    duplicated_completions = sorted(j for j, n in completions.items() if n > 1)

    window = duplicated = 0
    window_causes: Counter[str] = Counter()
    duplicated_keys = []
    for key, times in delivered.items():
        if len(times) < 2:
            continue
        job_id = key.removesuffix(":post")
        post = effects_of.get(job_id, {}).get("post")
        w, dup, c = classify_repeats(
            sorted(times), events_of.get(job_id, []), post["attempt"] if post else None, kills
        )
        window, duplicated, window_causes = window + w, duplicated + dup, window_causes + c
        if dup:
            duplicated_keys.append(key)

    model_window, model_duplicated = model_repeats(model_calls, kills)
    succeeded = [j for j in acked.values() if by_id.get(j, {}).get("state") == JobState.SUCCEEDED]
    ok_calls = [calls_of[f"{j}:triage"]["ok"] for j in succeeded]
    all_calls = [sum(c.values()) for c in calls_of.values()]
    report: dict[str, Any] = {
        "submitted": submitted,
        "acknowledged": len(acked),
        "succeeded": states[JobState.SUCCEEDED],
        "dead_lettered": states[JobState.DEAD_LETTERED],
        "cancelled": states[JobState.CANCELLED],
        "lost": len(lost),
        "duplicated_effects": duplicated_effect_rows + duplicated,
        "duplicated_completions": len(duplicated_completions),
        "unexpected": len(unexpected),
        "effect_window_repeats": window,
        "duplicated_effect_rows": duplicated_effect_rows,
        "duplicated_deliveries": duplicated,
        "redriven": len(redriven),
        "model_calls": {
            "total": len(model_calls),
            "by_outcome": dict(Counter(str(c["outcome"]) for c in model_calls)),
            "ok_per_effect_mean": round(sum(ok_calls) / len(ok_calls), 3) if ok_calls else 0,
            "ok_per_effect_max": max(ok_calls, default=0),
            "calls_per_effect_mean": round(sum(all_calls) / len(all_calls), 3) if all_calls else 0,
            "calls_per_effect_max": max(all_calls, default=0),
            "effects_with_more_than_one_ok_call": sum(1 for n in ok_calls if n > 1),
            # An answer the caller never recorded because we SIGKILLed it right after.
            "ok_repeats_after_a_kill": model_window,
            "ok_repeats_otherwise": model_duplicated,
        },
        "effect_window_repeats_by_cause": dict(window_causes),
        "dead_lettered_by_cause": dict(
            Counter(
                cause(by_id[j]["last_error"])
                for j in acked.values()
                if by_id.get(j, {}).get("state") == JobState.DEAD_LETTERED
            )
        ),
        "lost_jobs": lost[:50],
        "unexpected_jobs": unexpected[:50],
        "duplicated_completion_jobs": duplicated_completions[:50],
        "duplicated_delivery_keys": duplicated_keys[:50],
    }
    return report


def violated(report: dict[str, Any]) -> bool:
    keys = ("lost", "duplicated_effects", "duplicated_completions", "unexpected")
    return any(report[k] for k in keys) or report["acknowledged"] < report["submitted"]
