"""Where a chaos run's time went (issue 30, item 16: some seeds' runs took twice as long,
and the report did not say why). Pure functions from the run's marks and the store's
rows to the report's ``time`` section:

- the phases (start-up, submitting, the faults after it, the first drain, the redrive
  and second drain, the closing checks), the slowest named;
- what the first drain waited on last: the job that finished last, and how its life was
  spent (waiting for a worker, running, a lease left to expire after a kill or behind a
  slow worker, a timer, a callback and how it ended, its children);
- the leases left to expire: the system's expected cost of a SIGKILL (a killed worker's
  lease holds its job until the visibility timeout has passed and another claims it);
- how long the approvals waited for their first run to open the callback (the backlog
  ahead of them), which the harness's answers must outwait.
"""

from __future__ import annotations

import datetime as dt
import itertools
from collections import defaultdict
from collections.abc import Mapping, Sequence
from typing import Any

from app.states import JobState
from app.tools.chaos.per_kind import FINAL, ref_of_job
from app.tools.chaos.repeats import when

# (name, from mark, to mark): config.Run.mark's names, in the order orchestrate sets them.
PHASES = (
    ("stack start-up", None, "started"),
    ("submitting, with faults", "faults_started", "submitted"),
    ("faults after the submissions", "submitted", "faults_ended"),
    ("first drain", "faults_ended", "drained"),
    ("redrive and second drain", "drained", "redrained"),
    ("closing checks", "redrained", "total"),
)
WAITING_FOR_A_WORKER = "waiting for a worker (backlog, backoff, running cap)"
RUNNING = "running"
LEASE_EXPIRING = "a lease left to expire (a killed or slow worker; expected)"
LEASED = (JobState.LEASED, JobState.RUNNING)
UNCLAIMED = (JobState.QUEUED, JobState.RETRYING, JobState.STALLED)


def phases(timings: Mapping[str, float]) -> list[dict[str, Any]]:
    """Each phase whose marks were set, with its seconds."""
    found = []
    for name, start, end in PHASES:
        if end in timings and (start is None or start in timings):
            seconds = timings[end] - (timings[start] if start else 0.0)
            found.append({"phase": name, "seconds": round(seconds, 2)})
    return found


def slowest(timings: Mapping[str, float]) -> dict[str, Any]:
    """The phases, and the slowest of them (the run's marks complete: at its end)."""
    found: dict[str, Any] = {"phases": phases(timings)}
    if found["phases"]:
        found["slowest_phase"] = max(found["phases"], key=lambda p: p["seconds"])
    return found


def lease_expired(before: Mapping[str, Any], after: Mapping[str, Any]) -> bool:
    """``after`` took the job from a holder whose lease ran out: claimed again from
    leased or running, or marked stalled by the sweeper."""
    return after["from_state"] in LEASED and after["to_state"] in (
        JobState.LEASED,
        JobState.STALLED,
    )


def _waiting_on(detail: str, callback_state: Mapping[str, str]) -> str:
    """'waiting for callback approve, deadline …' -> 'callback approve (timed_out)'."""
    what = detail.removeprefix("waiting for ").split(",")[0].split(" until ")[0].split(":")[0]
    kind, _, key = what.partition(" ")
    if kind == "callback" and key in callback_state:
        return f"waiting: callback {key} ({callback_state[key]})"
    return f"waiting: {kind}" if kind else "waiting"


def spent(
    events: Sequence[Mapping[str, Any]], callback_state: Mapping[str, str], until: dt.datetime
) -> dict[str, float]:
    """How one job's life, from its first event to ``until``, was spent, in seconds."""
    spent_on: dict[str, float] = defaultdict(float)
    for before, after in zip(events, [*events[1:], None], strict=True):
        end = when(after["at"]) if after is not None else until
        seconds = (min(end, until) - when(before["at"])).total_seconds()
        if seconds <= 0:
            continue
        state = before["to_state"]
        if state in UNCLAIMED:
            spent_on[WAITING_FOR_A_WORKER] += seconds
        elif state in LEASED:
            expired = after is not None and lease_expired(before, after)
            spent_on[LEASE_EXPIRING if expired else RUNNING] += seconds
        elif state == JobState.WAITING:
            spent_on[_waiting_on(str(before.get("detail") or ""), callback_state)] += seconds
        if end >= until:
            break
    return spent_on


def where_time_went(
    *,
    timings: Mapping[str, float],
    started_at: dt.datetime,
    acked: Mapping[str, str],
    jobs: Sequence[Mapping[str, Any]],
    events: Sequence[Mapping[str, Any]],
    callbacks: Sequence[Mapping[str, Any]] = (),
    answers: Mapping[str, Mapping[str, Any]] | None = None,
) -> dict[str, Any]:
    """The report's ``time`` section but the phases (``slowest``: see the module's note).
    ``started_at``: the wall clock at the run's start, which ``timings`` count from."""
    found: dict[str, Any] = {}
    by_job: dict[str, list[Mapping[str, Any]]] = defaultdict(list)
    for e in events:
        by_job[e["job_id"]].append(e)
    # The first drain's end: a job redriven after it finished twice, the first time counts.
    drained = started_at + dt.timedelta(seconds=timings.get("drained", float("inf")))
    last: tuple[dt.datetime, str] | None = None
    for job_id, evs in by_job.items():
        final = next((when(e["at"]) for e in evs if e["to_state"] in FINAL), None)
        if final is not None and final <= drained and (last is None or final > last[0]):
            last = (final, job_id)
    if last is not None:
        at, job_id = last
        states = {str(c["key"]): str(c["state"]) for c in callbacks if c["job_id"] == job_id}
        by_id = {j["id"]: j for j in jobs}
        on = spent(by_job[job_id], states, at)
        found["drain_ended_with"] = {
            "ref": ref_of_job(job_id, {v: k for k, v in acked.items()}, by_id)
            if job_id in by_id
            else "?",
            "job_id": job_id,
            "kind": by_id.get(job_id, {}).get("kind", "?"),
            "finished_at": round((at - started_at).total_seconds(), 2),
            "spent": {k: round(v, 2) for k, v in sorted(on.items(), key=lambda kv: -kv[1])},
        }
    expiries = [
        (when(after["at"]) - when(before["at"])).total_seconds()
        for evs in by_job.values()
        for before, after in itertools.pairwise(evs)
        if before["to_state"] in LEASED and lease_expired(before, after)
    ]
    found["leases_left_to_expire"] = {
        "count": len(expiries),
        "seconds": round(sum(expiries), 2),
        "longest": round(max(expiries, default=0.0), 2),
    }
    opened = [
        a["opened"] - a["since"] for a in (answers or {}).values() if "opened" in a and "since" in a
    ]
    found["approvals_waiting_for_their_callback"] = {
        "count": len(opened),
        "longest": round(max(opened, default=0.0), 2),
    }
    return found


def summary(time: Mapping[str, Any]) -> list[tuple[str, str]]:
    """The report's rows for ``time``: (check, value)."""
    rows = []
    if "slowest_phase" in time:
        slow = time["slowest_phase"]
        rows.append(("slowest phase", f"{slow['phase']}: {slow['seconds']:.1f} s"))
        rows.append(
            ("phases", ", ".join(f"{p['phase']} {p['seconds']:.1f} s" for p in time["phases"]))
        )
    tail = time.get("drain_ended_with")
    if tail:
        on = ", ".join(f"{k} {v:.1f} s" for k, v in list(tail["spent"].items())[:4])
        rows.append(
            (
                "the first drain ended with",
                f"{tail['ref']} ({tail['kind']}) at {tail['finished_at']:.1f} s: {on}",
            )
        )
    leases = time.get("leases_left_to_expire", {})
    rows.append(
        (
            "leases left to expire (kills, slow workers; expected)",
            f"{leases.get('count', 0)}: {leases.get('seconds', 0):.1f} s in all, "
            f"longest {leases.get('longest', 0):.1f} s",
        )
    )
    waited = time.get("approvals_waiting_for_their_callback", {})
    if waited.get("count"):
        rows.append(
            (
                "approvals: longest wait for the callback to open (backlog)",
                f"{waited['longest']:.1f} s",
            )
        )
    return rows
