"""The invariants on one job at a time (docs/explain/design.md#invariants): its row,
timeline and effects, as the crash-point and e2e tests check them after each fault
(tests/invariants.py). Pure; ``checker.check`` is the whole run's."""

from __future__ import annotations

import dataclasses
import itertools
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

from app.states import FINAL_FOR_NOW, TERMINAL, JobState
from app.tools.chaos.per_kind import TRIAGE

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
        not row["last_error"] or row["dead_lettered_by"] not in ("engine", "sweeper", "deadline")
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
    # A fork's inherited steps ran (and called the model) as its original: checked there.
    own = [f["key"] for f in effects if not f.get("inherited_from")]
    key = f"{job_id}:triage"
    n_ok = outside.ok_calls.get(key, 0)
    if n_ok > outside.limit:
        found.append(f"2: the model answered {n_ok} times for {key} (at most {outside.limit})")
    if "triage" in own and n_ok == 0:
        found.append("2: a triage effect is recorded but the model never answered 'ok'")
    if state == JobState.SUCCEEDED and "triage" not in keys:
        found.append("2: succeeded without its triage effect")
    post = next((f for f in effects if f["key"] == "post" and not f.get("inherited_from")), None)
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
    # A fork's inherited effects were written under its original's claims: checked there.
    effects = [f for f in effects if not f.get("inherited_from")]
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
