"""Telling a documented repeat from a duplicate: DESIGN.md "Effects" 4 allows one more
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
