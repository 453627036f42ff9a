"""The invariant checker (DESIGN.md "Invariants"), used by ``tasklease chaos`` and by the
tests (tests/invariants.py): pure functions from the witnesses (the store's rows, the
fake model's call log, the webhook's deliveries) to what was violated.

``check`` is Jepsen's queue checker over a whole chaos run; ``job_violations`` checks
one job's row, timeline and effects, as the crash-point tests do after each fault.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import itertools
from collections import Counter, defaultdict
from collections.abc import Mapping, Sequence
from typing import Any

from app.chaos.repeats import classify_repeats, model_repeats, when
from app.states import FINAL_FOR_NOW, TERMINAL, JobState

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
    """Jepsen's queue checker, for tasklease's invariants. Pure: facts in, report out.
    Past a screen on purpose: index, one pass and report read best as one."""
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
        delivered[str(d["idempotency_key"])].append(when(d["at"]))

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
        for why in _odd(job, tag, effects_of.get(job_id, {}), delivered, calls_of, events_of):
            odd(job_id, why)

    completions = Counter(e["job_id"] for e in events if e["to_state"] == JobState.SUCCEEDED)
    duplicated_completions = sorted(j for j, n in completions.items() if n > 1)

    window, duplicated, window_causes, duplicated_keys = _delivery_repeats(
        delivered, effects_of, events_of, kills
    )
    succeeded = [j for j in acked.values() if by_id.get(j, {}).get("state") == JobState.SUCCEEDED]
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
        "model_calls": _model_call_stats(model_calls, calls_of, succeeded, kills),
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


def _odd(
    job: dict[str, Any],
    tag: str,
    fx: dict[str, dict[str, Any]],
    delivered: dict[str, list[dt.datetime]],
    calls_of: dict[str, Counter[str]],
    events_of: dict[str, list[dict[str, Any]]],
) -> list[str]:
    """What is unexpected about one acknowledged job, given its final state."""
    job_id, state = job["id"], job["state"]
    found = []
    if state == JobState.SUCCEEDED:
        if set(fx) != {"triage", "post"}:
            found.append(f"succeeded with effects {sorted(fx)}")
        if not (job["result"] or {}).get("delivered"):
            found.append("succeeded but its result says the reply was not delivered")
        if not delivered.get(f"{job_id}:post"):
            found.append("succeeded but the webhook never received its reply")
        if not calls_of[f"{job_id}:triage"]["ok"]:
            found.append("succeeded with no successful model call in the call log")
        if tag == "[permanent]":
            found.append("tagged [permanent] but succeeded")
    elif state == JobState.DEAD_LETTERED and cause(job["last_error"]) not in (
        "permanent (tag)",
        "permanent (injected)",
    ):
        found.append(
            f"still dead-lettered after a redrive with the cause gone: {job['last_error']}"
        )
    elif state == JobState.CANCELLED:
        found.append("cancelled, and nobody cancelled it")
    segment_attempts: set[int] = set()
    for e in events_of.get(job_id, []):
        if e["from_state"] == JobState.DEAD_LETTERED:
            segment_attempts = set()
        if e["to_state"] == JobState.RUNNING:
            segment_attempts.add(e["attempt"])
            if len(segment_attempts) > job["max_attempts"]:
                found.append(f"ran more attempts than its budget of {job['max_attempts']}")
                break
    return found


def _delivery_repeats(
    delivered: dict[str, list[dt.datetime]],
    effects_of: dict[str, dict[str, dict[str, Any]]],
    events_of: dict[str, list[dict[str, Any]]],
    kills: list[dict[str, Any]],
) -> tuple[int, int, Counter[str], list[str]]:
    """Webhook keys delivered more than once: (window repeats, duplicates, the window's
    causes, the duplicated keys)."""
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
    return window, duplicated, window_causes, duplicated_keys


def _model_call_stats(
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


def violated(report: dict[str, Any]) -> bool:
    keys = ("lost", "duplicated_effects", "duplicated_completions", "unexpected")
    return any(report[k] for k in keys) or report["acknowledged"] < report["submitted"]


# --- one job at a time (the crash-point and e2e tests) ---------------------------

ON_ITS_WAY = frozenset(
    {JobState.QUEUED, JobState.LEASED, JobState.RUNNING, JobState.RETRYING, JobState.STALLED}
)
TRIAGE = "support.triage"
Row = Mapping[str, Any]


@dataclasses.dataclass(frozen=True)
class Outside:
    """What the outside systems saw: the model's 'ok' answers and the webhook's deliveries
    per idempotency key, and how many of each one key may have (2 inside the window)."""

    ok_calls: Mapping[str, int]
    delivered: Mapping[str, int]
    limit: int = 1
    webhook: bool = True  # a receiver was running, so a delivery it did not get is a loss


def job_violations(
    job_id: Any,
    row: Row | None,
    events: Sequence[Row],
    effects: Sequence[Row],
    outbox_rows: int,
    outside: Outside,
    *,
    settled: bool = True,
) -> list[str]:
    """Invariants 1, 2, 3 and 5 for one job, each broken one as a line naming its number.

    ``settled``: every job must be final; with False one still on its way passes.
    """
    if row is None:
        return ["1: the job was accepted but its row is gone (lost)"]
    return [
        *_never_lost(row, settled),
        *_once(job_id, row, events, effects, outside),
        *_zombies_change_nothing(row, events, effects),
        *_nothing_half_written(row, events, outbox_rows),
    ]


def delivery_violations(outside: Outside) -> list[tuple[str, str]]:
    """Invariant 2 on the webhook: (key, what) for each key delivered too often."""
    return [
        (key, f"2: the webhook got {n} deliveries for key {key}")
        for key, n in sorted(outside.delivered.items())
        if n > outside.limit
    ]


def _never_lost(row: Row, settled: bool) -> list[str]:
    found = []
    state = JobState(row["state"])
    allowed = FINAL_FOR_NOW if settled else FINAL_FOR_NOW | ON_ITS_WAY
    if state not in allowed:
        found.append(f"1: state {state} after the drain; expected one of {sorted(allowed)}")
    if state == JobState.SUCCEEDED and (row["result"] is None or row["finished_at"] is None):
        found.append("1: succeeded without a result or finished_at")
    if state == JobState.DEAD_LETTERED and (
        not row["last_error"] or row["dead_lettered_by"] not in ("engine", "sweeper")
    ):
        found.append(
            f"1: dead_lettered without a reason or a dead_lettered_by "
            f"({row['last_error']!r}, {row['dead_lettered_by']!r})"
        )
    if state in FINAL_FOR_NOW and row["lease_token"] is not None:
        found.append(f"1: {state} but still holds a lease token")
    if state in (JobState.LEASED, JobState.RUNNING) and row["lease_expires_at"] is None:
        found.append(f"1: {state} with no lease expiry: nothing would ever rescue it")
    return found


def _once(
    job_id: Any, row: Row, events: Sequence[Row], effects: Sequence[Row], outside: Outside
) -> list[str]:
    found = []
    state = JobState(row["state"])
    succeeded = [e for e in events if e["to_state"] == JobState.SUCCEEDED]
    if len(succeeded) > 1:
        found.append(f"2: completed {len(succeeded)} times (events {[e['id'] for e in succeeded]})")
    if state == JobState.SUCCEEDED and not succeeded:
        found.append("2: succeeded with no 'succeeded' event")
    keys = [f["key"] for f in effects]
    dupes = sorted(k for k, n in Counter(keys).items() if n > 1)
    if dupes:  # the primary key forbids it; a schema change must not lose that
        found.append(f"2: effects recorded twice: {dupes}")
    if row["kind"] != TRIAGE:
        return found
    key = f"{job_id}:triage"
    n_ok = outside.ok_calls.get(key, 0)
    if n_ok > outside.limit:
        found.append(f"2: the model answered {n_ok} times for {key} (at most {outside.limit})")
    if "triage" in keys and n_ok == 0:
        found.append("2: a triage effect is recorded but the model never answered 'ok'")
    if state == JobState.SUCCEEDED and "triage" not in keys:
        found.append("2: succeeded without its triage effect")
    post = next((f for f in effects if f["key"] == "post"), None)
    if (
        post is not None
        and post["result"].get("delivered")
        and outside.webhook
        and outside.delivered.get(f"{job_id}:post", 0) == 0
    ):
        found.append("2: the post effect says delivered but the webhook never got it")
    return found


def _zombies_change_nothing(row: Row, events: Sequence[Row], effects: Sequence[Row]) -> list[str]:
    found = []
    claims = [e for e in events if e["to_state"] == JobState.LEASED]
    for f in effects:
        before = [c for c in claims if c["at"] <= f["recorded_at"]]
        holder = before[-1] if before else None
        if holder is None or (holder["attempt"], holder["worker"]) != (f["attempt"], f["worker"]):
            found.append(
                f"3: effect {f['key']!r} written by attempt {f['attempt']} ({f['worker']}) "
                f"while the claim in force was "
                + (f"attempt {holder['attempt']} ({holder['worker']})" if holder else "none")
            )
    # Against the highest attempt ever claimed, not the row's: a lease handed back
    # returns its attempt (the row goes back to attempt 0 with step-0 recorded).
    claimed = max((c["attempt"] for c in claims), default=0)
    late = [f["key"] for f in effects if f["attempt"] > claimed]
    if late:
        found.append(f"3: effects {late} carry an attempt above any claimed ({claimed})")
    return found + _after_the_end(row, events, effects)


def _after_the_end(row: Row, events: Sequence[Row], effects: Sequence[Row]) -> list[str]:
    """Invariant 3 on the timeline: nothing written after the job ended, no stale view."""
    found = []
    succeeded = [e for e in events if e["to_state"] == JobState.SUCCEEDED]
    if succeeded:
        last = succeeded[-1]
        if last["attempt"] != row["attempt"]:
            found.append(
                f"3: the 'succeeded' event is attempt {last['attempt']}, the row attempt "
                f"{row['attempt']}"
            )
        if last["worker"] != row["lease_owner"]:
            found.append(
                f"3: completed by {last['worker']} but the row's lease owner is "
                f"{row['lease_owner']}"
            )
        after = [f["key"] for f in effects if f["recorded_at"] > last["at"]]
        if after:
            found.append(f"3: effects {after} recorded after the job had succeeded")
    cancelled = [e for e in events if e["to_state"] == JobState.CANCELLED]
    if cancelled:
        after = [f["key"] for f in effects if f["recorded_at"] > cancelled[0]["at"]]
        if after:
            found.append(f"3: effects {after} recorded after the job was cancelled")
    for prev, ev in itertools.pairwise(events):
        if prev["to_state"] in TERMINAL:
            found.append(
                f"3: event #{ev['id']} ({ev['from_state']} -> {ev['to_state']} by "
                f"{ev['worker']}) after the job was {prev['to_state']}"
            )
        if ev["from_state"] is not None and ev["from_state"] != prev["to_state"]:
            found.append(
                f"3: event #{ev['id']} goes {ev['from_state']} -> {ev['to_state']} but the "
                f"job was {prev['to_state']}: a write from a stale view"
            )
    return found


def _nothing_half_written(row: Row, events: Sequence[Row], outbox_rows: int) -> list[str]:
    found = [
        f"5: the row has no {c}" for c in ("kind", "payload", "request_hash") if row[c] is None
    ]
    if outbox_rows < 1:
        found.append("5: no outbox row: a failed first send would never be retried")
    if not events or (events[0]["from_state"], events[0]["to_state"]) != (None, "queued"):
        found.append("5: the timeline does not start with the job's acceptance (-> queued)")
    return found
