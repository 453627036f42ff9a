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
from app.kinds.waits import Rule
from app.states import FINAL_FOR_NOW, TERMINAL, JobState

FINAL = tuple(s.value for s in FINAL_FOR_NOW)
TRIAGE = "support.triage"


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
    callbacks: Sequence[Mapping[str, Any]] = (),
    plans: Mapping[str, str] | None = None,
    answers: Mapping[str, Mapping[str, Any]] | None = None,
    now: dt.datetime | None = None,
    grace: float = 0.0,
    delay_cap: float | None = None,
) -> dict[str, Any]:
    """Jepsen's queue checker, for tasklease's invariants. Pure: facts in, report out.

    Every job is checked, the submitted ones and the children they spawned: none lost
    (finished, or waiting for a condition not met yet), none completed twice, no effect
    twice, no wait left stuck (its callback answered, its gather decided or its time
    overdue by more than ``grace`` seconds at ``now``), and what each kind should have
    done, done (``plans``: ref -> what the harness did with an approval; ``answers``:
    what its answers met). Past a screen on purpose: index, one pass and report read
    best as one."""
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
    world = World(by_id, effects_of, events_of, callbacks_of, children_of, set(redriven))

    states: Counter[str] = Counter()
    by_kind: dict[str, Counter[str]] = defaultdict(Counter)
    lost: list[dict[str, Any]] = []
    stuck: list[dict[str, Any]] = []
    unexpected: list[dict[str, str]] = []

    def odd(job_id: str, why: str) -> None:
        unexpected.append({"job_id": job_id, "ref": _ref(job_id, ref_of, by_id), "why": why})

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
        found = _odd(job, world) + _odd_kind(
            job, world, tags.get(ref, ""), plans.get(ref, ""), answers.get(ref), delivered, calls_of
        )
        for why in found:
            odd(job_id, why)

    completions = Counter(e["job_id"] for e in events if e["to_state"] == JobState.SUCCEEDED)
    duplicated_completions = sorted(j for j, n in completions.items() if n > 1)

    window, duplicated, window_causes, duplicated_keys = _delivery_repeats(
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
        "waits": _wait_stats(jobs, events, effects, callbacks, answers, delay_cap),
        "by_kind": {k: dict(v) for k, v in sorted(by_kind.items())},
        "model_calls": _model_call_stats(model_calls, calls_of, succeeded, kills),
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


@dataclasses.dataclass(frozen=True)
class World:
    """The witnesses indexed by job: what the per-job checks look things up in."""

    jobs: Mapping[str, Mapping[str, Any]]
    effects: Mapping[str, Mapping[str, Mapping[str, Any]]]
    events: Mapping[str, Sequence[Mapping[str, Any]]]
    callbacks: Mapping[str, Mapping[str, Mapping[str, Any]]]
    children: Mapping[str, Sequence[Mapping[str, Any]]]
    redriven: set[str]


def _ref(job_id: str, ref_of: Mapping[str, str], by_id: Mapping[str, Mapping[str, Any]]) -> str:
    if job_id in ref_of:
        return ref_of[job_id]
    parent = by_id.get(job_id, {}).get("parent_id")
    return f"{by_id[job_id].get('spawn_key')} of {ref_of.get(parent, parent)}" if parent else "?"


def child_state(state: str) -> str:
    """A job's state as a gather sees it (app.kinds.waits.ChildState)."""
    if state == JobState.SUCCEEDED:
        return "succeeded"
    return "failed" if state in (JobState.DEAD_LETTERED, JobState.CANCELLED) else "unfinished"


def stuck_wait(
    job: Mapping[str, Any], world: World, now: dt.datetime | None, grace: float
) -> str | None:
    """Why a waiting job should not be waiting any more, or None: its callback answered,
    its gather decided (by its children's states, the rule evaluated here in Python, not
    by the SQL that wakes it), or its wake-up time past by more than ``grace`` seconds."""
    kind, key = job.get("wait_kind"), job.get("wait_key")
    if kind == "callback":
        cb = world.callbacks.get(job["id"], {}).get(str(key))
        if cb is not None and cb["state"] != "pending":
            return f"its callback {key!r} was answered ({cb['state']}) but it still waits"
    if kind == "children":
        raw = job.get("wait_rule") or {}
        rule = Rule(tuple(raw["children"]), raw["need"], raw["all"], raw["tolerate"])
        seen = {c: child_state(world.jobs.get(c, {}).get("state", "")) for c in rule.children}
        decided = rule.decide(seen)  # type: ignore[arg-type]
        if decided is not None:
            return f"its gather {key!r} is decided ({'holds' if decided else 'failed'})"
    wake_at = job.get("wake_at")
    if wake_at is not None and now is not None:
        late = (now - when(wake_at)).total_seconds()
        if late > grace:
            return f"its {kind} {key!r} was due {late:.1f} s ago (grace {grace:g} s)"
    return None


def _wait_stats(
    jobs: Sequence[Mapping[str, Any]],
    events: Sequence[Mapping[str, Any]],
    effects: Sequence[Mapping[str, Any]],
    callbacks: Sequence[Mapping[str, Any]],
    answers: Mapping[str, Mapping[str, Any]],
    delay_cap: float | None,
) -> dict[str, Any]:
    cb_states = Counter(str(c["state"]) for c in callbacks)
    seconds = [a.get("second") for a in answers.values() if "second" in a]
    timers = [
        (when(f["result"]) - when(f["recorded_at"])).total_seconds()
        for f in effects
        if str(f["key"]).startswith("sleep:") and isinstance(f.get("result"), str)
    ]
    return {
        "timers": len(timers),
        # Longer than the message delay cap: their wake-up was the sweeper's to send.
        "timers_past_the_delay_cap": sum(1 for t in timers if t > delay_cap)
        if delay_cap is not None
        else None,
        "suspensions": sum(1 for e in events if e["to_state"] == JobState.WAITING),
        # waiting -> leased: a due timer or a passed deadline, claimed from its message.
        "woken_when_due": sum(
            1
            for e in events
            if e["from_state"] == JobState.WAITING and e["to_state"] == JobState.LEASED
        ),
        # waiting -> queued: an answer, a child's finish, a condition met while suspending.
        "woken_by_answer_or_children": sum(
            1
            for e in events
            if e["from_state"] == JobState.WAITING and e["to_state"] == JobState.QUEUED
        ),
        # An answer or a child's finish that came while the job was suspending.
        "woken_at_once": sum(
            1 for e in events if str(e.get("detail") or "").startswith("woken at once")
        ),
        "callbacks_opened": len(callbacks),
        "callbacks_answered": cb_states["succeeded"] + cb_states["failed"],
        "callbacks_timed_out": cb_states["timed_out"],
        "callbacks_pending": cb_states["pending"],
        "harness_answers": dict(Counter(str(a.get("first")) for a in answers.values())),
        "duplicate_answers_refused": sum(1 for s in seconds if s == "conflict"),
        "duplicate_answers_accepted": sum(1 for s in seconds if s == "answered"),
        "children_spawned": sum(1 for j in jobs if j.get("parent_id")),
    }


def _odd(job: Mapping[str, Any], world: World) -> list[str]:
    """What is unexpected about any job, whatever its kind, given its final state."""
    job_id, state = job["id"], job["state"]
    found = []
    if state == JobState.DEAD_LETTERED and not cause(job["last_error"]).startswith("permanent"):
        found.append(
            f"still dead-lettered after a redrive with the cause gone: {job['last_error']}"
        )
    elif state == JobState.CANCELLED:
        found.append("cancelled, and nobody cancelled it")
    segment_attempts: set[int] = set()
    for e in world.events.get(job_id, []):
        if e["from_state"] == JobState.DEAD_LETTERED:
            segment_attempts = set()
        if e["to_state"] == JobState.RUNNING:
            segment_attempts.add(e["attempt"])
            if len(segment_attempts) > job["max_attempts"]:
                found.append(f"ran more attempts than its budget of {job['max_attempts']}")
                break
    parent_id = job.get("parent_id")
    if parent_id:
        found += _odd_child(job, world, parent_id)
    return found


def _odd_kind(
    job: Mapping[str, Any],
    world: World,
    tag: str,
    plan: str,
    answer: Mapping[str, Any] | None,
    delivered: dict[str, list[dt.datetime]],
    calls_of: dict[str, Counter[str]],
) -> list[str]:
    """What is unexpected about a job of its kind: the effects and result it should have."""
    kind = job.get("kind") or TRIAGE
    fx = world.effects.get(job["id"], {})
    if kind == TRIAGE:
        return _odd_triage(job, tag, fx, delivered, calls_of)
    if kind == "demo.approval":
        return _odd_approval(job, world, plan, answer)
    if job["state"] != JobState.SUCCEEDED:
        return []
    if kind == "demo.nap":
        return _odd_nap(job, fx)
    if kind == "demo.fanout":
        return _odd_fanout(job, world, fx)
    return []


def _odd_triage(
    job: Mapping[str, Any],
    tag: str,
    fx: Mapping[str, Mapping[str, Any]],
    delivered: dict[str, list[dt.datetime]],
    calls_of: dict[str, Counter[str]],
) -> list[str]:
    job_id, found = job["id"], []
    if job["state"] == JobState.SUCCEEDED:
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
    return found


# Recorded timers are compared with the database's clock; the worker's may be a hair off.
CLOCK_SLACK = dt.timedelta(milliseconds=50)


def _odd_nap(job: Mapping[str, Any], fx: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """Every nap recorded once with its effect after it, none woken before it was due."""
    naps = int((job["payload"] or {}).get("naps", 1))
    want = {f"sleep:nap-{i}" for i in range(naps)} | {f"woke-{i}" for i in range(naps)}
    found = [] if set(fx) == want else [f"succeeded with effects {sorted(fx)}, not {sorted(want)}"]
    for i in range(naps):
        timer, woke = fx.get(f"sleep:nap-{i}"), fx.get(f"woke-{i}")
        if timer is None or woke is None:
            continue
        due = when(timer["result"])
        if when(woke["recorded_at"]) + CLOCK_SLACK < due:
            found.append(f"nap {i} woke at {woke['recorded_at']}, before it was due ({due})")
    if (job["result"] or {}).get("naps") != naps:
        found.append(f"its result says {job['result']}, not {naps} naps")
    return found


def _odd_approval(
    job: Mapping[str, Any], world: World, plan: str, answer: Mapping[str, Any] | None
) -> list[str]:
    """Answered: approved with the harness's answer, a second answer refused. Left alone:
    timed out and escalated. Either way the callback's row says the same."""
    found = []
    cb = world.callbacks.get(job["id"], {}).get("approve")
    result = job["result"] or {}
    succeeded = job["state"] == JobState.SUCCEEDED
    if plan in ("answer", "answer twice"):
        first = (answer or {}).get("first")
        if first != "answered":
            found.append(f"the harness could not answer its callback: {first}")
        elif succeeded and result.get("answer") != (answer or {}).get("result"):
            found.append(f"approved with {result.get('answer')!r}, not the harness's answer")
        if cb is not None and first == "answered" and cb["state"] != "succeeded":
            found.append(f"answered, but its callback is {cb['state']}")
        if plan == "answer twice" and (answer or {}).get("second") == "answered":
            found.append("a second answer to its callback was accepted")
        elif plan == "answer twice" and (answer or {}).get("second") != "conflict":
            found.append(f"a second answer met {(answer or {}).get('second')}, not a conflict")
    elif plan == "time out":
        if succeeded and not result.get("escalated"):
            found.append(f"never answered, yet it succeeded with {result}")
        if cb is not None and cb["state"] != "timed_out":
            found.append(f"never answered, yet its callback is {cb['state']}")
    if succeeded and cb is None:
        found.append("succeeded without a callback row")
    return found


def _odd_fanout(
    job: Mapping[str, Any], world: World, fx: Mapping[str, Mapping[str, Any]]
) -> list[str]:
    """A succeeded fan-out: its children all spawned once, its result's counts agree with
    the gather it recorded and with its children's states now."""
    p = job["payload"] or {}
    n, result = int(p.get("children", 3)), job["result"] or {}
    kids = {str(c["spawn_key"]): c for c in world.children.get(job["id"], [])}
    found = []
    want = {f"child-{i}" for i in range(n)}
    if set(kids) != want:
        found.append(f"its children are {sorted(kids)}, not {sorted(want)}")
    for key, kid in kids.items():
        spawned = fx.get(f"spawn:{key}")
        if spawned is None or spawned["result"] != kid["id"]:
            found.append(f"child {key} ({kid['id']}) is not the one its spawn recorded")
    gathered = (fx.get("gather:children") or {}).get("result")
    if not gathered:
        return [*found, "succeeded without a recorded gather"]
    counts = {k: len(gathered.get(k) or ()) for k in ("results", "errors", "unfinished")}
    if (result.get("children"), result.get("succeeded"), result.get("failed")) != (
        n,
        counts["results"],
        counts["errors"],
    ) or sum(counts.values()) != n:
        found.append(f"its result {result} disagrees with its gather {counts} of {n}")
    # "all" (no at_least) holds with every child finished and no more than tolerate failed.
    need = n - int(p.get("tolerate") or 0) if p.get("at_least") is None else int(p["at_least"])
    if not gathered.get("ok") or counts["results"] < need:
        found.append(f"succeeded with {counts['results']} of {need} children needed")
    now = {c["id"]: c["state"] for c in world.children.get(job["id"], [])}
    for cid in gathered.get("results") or {}:
        if now.get(cid) != JobState.SUCCEEDED:
            found.append(f"child {cid} gathered as succeeded is {now.get(cid)}")
    for cid in gathered.get("errors") or {}:
        if child_state(now.get(cid, "")) != "failed" and cid not in world.redriven:
            found.append(f"child {cid} gathered as failed is {now.get(cid)} (never redriven)")
    return found


def _odd_child(job: Mapping[str, Any], world: World, parent_id: str) -> list[str]:
    parent = world.jobs.get(parent_id)
    if parent is None:
        return [f"its parent {parent_id} is not in the store"]
    found = []
    spawned = world.effects.get(parent_id, {}).get(f"spawn:{job.get('spawn_key')}")
    if spawned is None or spawned["result"] != job["id"]:
        found.append(f"its parent never recorded spawning it as {job.get('spawn_key')!r}")
    if parent.get("kind") == "demo.fanout" and job["state"] in FINAL:
        fails = (parent["payload"] or {}).get("fail") or []
        meant_to_fail = str(job.get("spawn_key")) in {f"child-{i}" for i in fails}
        if meant_to_fail != (job["state"] == JobState.DEAD_LETTERED):
            meant = "fail" if meant_to_fail else "succeed"
            found.append(f"{job['state']}, yet its parent meant it to {meant}")
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
    keys = ("lost", "duplicated_effects", "duplicated_completions", "stuck_waits", "unexpected")
    return any(report.get(k) for k in keys) or report["acknowledged"] < report["submitted"]


# --- one job at a time (the crash-point and e2e tests) ---------------------------

ON_ITS_WAY = frozenset(
    {JobState.QUEUED, JobState.LEASED, JobState.RUNNING, JobState.RETRYING, JobState.STALLED}
)
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
    # A delayed submission (run_at / delay_seconds) is accepted waiting on its timer, with
    # no outbox row: the sweeper sends a wake-up nobody marked sent (wake_sent_at).
    delayed = bool(events) and (events[0]["from_state"], events[0]["to_state"]) == (
        None,
        "waiting",
    )
    if outbox_rows < 1 and not delayed:
        found.append("5: no outbox row: a failed first send would never be retried")
    if not events or (
        (events[0]["from_state"], events[0]["to_state"]) != (None, "queued") and not delayed
    ):
        found.append("5: the timeline does not start with the job's acceptance (-> queued)")
    return found
