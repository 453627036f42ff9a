"""Telling a documented repeat from a duplicate: docs/explain/design.md#effects (point 4) allows one more
outside call when a process dies between the call and the insert that records it."""

from __future__ import annotations

import datetime as dt
from collections import Counter, defaultdict
from typing import Any

from app.states import JobState


def when(value: Any) -> dt.datetime:
    """A timestamp from a row (a datetime) or from a JSON log (ISO text)."""
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
    other attempt running at the same time, is the documented window (docs/explain/design.md#effects: the
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
            when(events[i + 1]["at"])
            if i + 1 < len(events)
            else dt.datetime.max.replace(tzinfo=dt.UTC)
        )
        spans.append((when(e["at"]), end, e["attempt"], e["worker"]))
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
            killed = any(x["worker"] == worker and start <= when(x["at"]) <= end for x in kills)
            causes["worker killed" if killed else "attempt cut short otherwise"] += 1
    window = min(extra, sum(causes.values()))
    return window, extra - window, causes


def model_repeats(
    model_calls: list[dict[str, Any]], kills: list[dict[str, Any]]
) -> tuple[int, int]:
    """Extra successful model calls per key: (made by a process killed right after, other)."""
    killed_at = {int(k["pid"]): when(k["at"]) for k in kills}
    ok: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for c in model_calls:
        if c["outcome"] == "ok":
            ok[str(c["key"])].append(c)
    window = other = 0
    for calls in ok.values():
        for c in sorted(calls, key=lambda c: when(c["at"]))[:-1]:
            death = killed_at.get(int(c["pid"]))
            if death is not None and death >= when(c["at"]):
                window += 1
            else:
                other += 1
    return window, other


def delivery_repeats(
    delivered: dict[str, list[dt.datetime]],
    effects_of: dict[str, dict[str, dict[str, Any]]],
    events_of: dict[str, list[dict[str, Any]]],
    kills: list[dict[str, Any]],
) -> tuple[int, int, Counter[str], list[str]]:
    """Webhook keys delivered more than once: (window repeats, duplicates, the window's
    causes, the duplicated keys). A key is ``<job id>:<effect key>`` (ctx.idempotency_key):
    a triage's post, an agent's tool call."""
    window = duplicated = 0
    window_causes: Counter[str] = Counter()
    duplicated_keys = []
    for key, times in delivered.items():
        if len(times) < 2:
            continue
        job_id, _, step = key.partition(":")
        recorded = effects_of.get(job_id, {}).get(step)
        w, dup, c = classify_repeats(
            sorted(times),
            events_of.get(job_id, []),
            recorded["attempt"] if recorded else None,
            kills,
        )
        window, duplicated, window_causes = window + w, duplicated + dup, window_causes + c
        if dup:
            duplicated_keys.append(key)
    return window, duplicated, window_causes, duplicated_keys


def throttle_counts(
    model_calls: list[dict[str, Any]], events: list[dict[str, Any]]
) -> dict[str, int]:
    """Throttles (429s) the fake model answered, and those the jobs' timelines show
    (retried without an attempt; fewer when a worker was killed before writing one)."""
    return {
        "answered": sum(1 for c in model_calls if c["outcome"] == "throttled"),
        "retried_without_an_attempt": sum(
            1 for e in events if str(e.get("detail") or "").startswith("throttled by ")
        ),
    }


def model_call_stats(
    model_calls: list[dict[str, Any]],
    calls_of: dict[str, Counter[str]],
    succeeded: list[str],
    kills: list[dict[str, Any]],
) -> dict[str, Any]:
    model_window, model_duplicated = model_repeats(model_calls, kills)
    ok_calls = [calls_of[f"{j}:triage"]["ok"] for j in succeeded]
    all_calls = [sum(c.values()) for c in calls_of.values()]
    return {
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
    }
