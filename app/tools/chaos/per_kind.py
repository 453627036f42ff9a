"""The chaos checker's look at each kind of work: the waits a job went through (stuck
waits, wake-up counts), and what each kind's result must agree with (a nap never woken
early, an approval carrying the harness's answer, a fan-out agreeing with its children,
a triage's effects). ``app.tools.chaos.checker`` runs these over every job."""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

from app.kinds.waits import Rule
from app.states import FINAL_FOR_NOW, JobState
from app.tools.chaos.per_key import replaced_by
from app.tools.chaos.repeats import when

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
    if text == "deadline passed":
        return "deadline"
    return "other"


@dataclasses.dataclass(frozen=True)
class World:
    """The witnesses indexed by job: what the per-job checks look things up in."""

    jobs: Mapping[str, Mapping[str, Any]]
    effects: Mapping[str, Mapping[str, Mapping[str, Any]]]
    events: Mapping[str, Sequence[Mapping[str, Any]]]
    callbacks: Mapping[str, Mapping[str, Mapping[str, Any]]]
    children: Mapping[str, Sequence[Mapping[str, Any]]]
    redriven: set[str]
    # "job_id:key" to a streamed answer's chunks (seq, text), in seq order.
    chunks: Mapping[str, Sequence[tuple[int, str]]] = dataclasses.field(default_factory=dict)


def ref_of_job(
    job_id: str, ref_of: Mapping[str, str], by_id: Mapping[str, Mapping[str, Any]]
) -> str:
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


def wait_stats(
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


def kind_oddities(job: Mapping[str, Any], world: World) -> list[str]:
    """What is unexpected about any job, whatever its kind, given its final state."""
    job_id, state = job["id"], job["state"]
    found = []
    # A deadline's end is checked by per_message.py (given one it cannot meet, or not given).
    ended = cause(job["last_error"])
    if (
        state == JobState.DEAD_LETTERED
        and not ended.startswith("permanent")
        and ended != "deadline"
    ):
        found.append(
            f"still dead-lettered after a redrive with the cause gone: {job['last_error']}"
        )
    elif state == JobState.CANCELLED and not replaced_by(world.events.get(job_id, [])):
        # A debounced job replaced by a newer one of its key: per_key.py checks it.
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


def odd_of_kind(
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
    if kind == "demo.write":
        return _odd_write(job, world, fx, calls_of)
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
        # A second answer is a duplicate only after a first one: without one (the harness
        # could not answer, found above) it proves nothing, and the harness sends none.
        second = (answer or {}).get("second")
        if plan == "answer twice" and first == "answered" and second == "answered":
            found.append("a second answer to its callback was accepted")
        elif plan == "answer twice" and first == "answered" and second != "conflict":
            found.append(f"a second answer met {second}, not a conflict")
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


def _odd_write(
    job: Mapping[str, Any],
    world: World,
    fx: Mapping[str, Mapping[str, Any]],
    calls_of: dict[str, Counter[str]],
) -> list[str]:
    """A streamed answer: its chunks seq 0..n-1 (no gap; the table keeps each once), one
    continuous text equal to the recorded effect's, the result's and the fake's; and no
    more model calls than attempts that ran (each continues, none starts over twice)."""
    from app.demos.triage.writing import fake_text

    job_id, found = job["id"], []
    chunks = world.chunks.get(f"{job_id}:answer", [])
    seqs = [seq for seq, _ in chunks]
    if seqs != list(range(len(seqs))):
        found.append(f"its chunks' seqs are not 0..{len(seqs) - 1} without a gap: {seqs[:20]}")
    ran = sum(1 for e in world.events.get(job_id, []) if e["to_state"] == JobState.RUNNING)
    calls = calls_of[f"{job_id}:answer"]["stream"]
    if calls > ran:
        found.append(f"{calls} model calls for its answer in {ran} attempts")
    if job["state"] != JobState.SUCCEEDED:
        return found
    payload = job["payload"] or {}
    want = fake_text(str(payload.get("prompt")), int(payload.get("words", 60)))
    text = "".join(t for _, t in chunks)
    recorded = (fx.get("answer") or {}).get("result") or {}
    if text != want:
        found.append(f"its chunks read {text[:60]!r}..., not the fake's text")
    if recorded.get("text") != want or (job["result"] or {}).get("text") != want:
        found.append("its recorded answer or result is not the fake's text")
    return found
