"""Where a chaos run's time went (app/tools/chaos/timeline.py, issue 30, item 16): the
slowest phase named, what the first drain waited on last, the leases left to expire."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest

from app.tools.chaos.timeline import slowest, summary, where_time_went

pytestmark = pytest.mark.unit

T0 = dt.datetime(2026, 12, 4, tzinfo=dt.UTC)
TIMINGS = {
    "started": 3.0,
    "faults_started": 3.2,
    "submitted": 6.0,
    "faults_ended": 23.0,
    "drained": 233.0,
    "redrained": 240.0,
    "total": 242.0,
}


def ev(job: str, seconds: float, a: str | None, b: str, detail: str = "") -> dict[str, Any]:
    return {
        "job_id": job,
        "at": T0 + dt.timedelta(seconds=seconds),
        "from_state": a,
        "to_state": b,
        "attempt": 1,
        "worker": "w",
        "detail": detail,
    }


def test_the_slowest_phase_is_named() -> None:
    found = slowest(TIMINGS)
    assert found["phases"][0]["phase"] == "stack start-up"
    assert found["slowest_phase"] == {"phase": "first drain", "seconds": 210.0}
    assert slowest({"started": 2.0})["slowest_phase"]["phase"] == "stack start-up"


def test_an_approval_left_to_time_out_is_what_the_drain_waited_on_last() -> None:
    # The shape of the failing seeds: an approval behind the backlog for 100 s, its
    # callback never answered, woken by its 120 s timeout; a triage job whose worker
    # was killed, its lease left to expire before another claimed it.
    deadline = "waiting for callback approve, deadline 2026-12-04T00:03:45+00:00"
    events = [
        ev("a", 5, None, "queued"),
        ev("a", 105, "queued", "leased"),
        ev("a", 105.5, "leased", "running"),
        ev("a", 106, "running", "waiting", deadline),
        ev("a", 229, "waiting", "leased", "woken: due"),
        ev("a", 229.5, "leased", "running"),
        ev("a", 230, "running", "succeeded"),
        ev("t", 5, None, "queued"),
        ev("t", 10, "queued", "leased"),
        ev("t", 10.2, "leased", "running"),
        ev("t", 15.2, "running", "leased"),  # claimed again: the killed worker's lease ran out
        ev("t", 15.4, "leased", "running"),
        ev("t", 16, "running", "dead_lettered"),
        ev("t", 236, "dead_lettered", "queued", "redriven"),  # after the first drain
        ev("t", 237, "queued", "succeeded"),
    ]
    jobs = [
        {"id": "a", "kind": "demo.approval", "parent_id": None},
        {"id": "t", "kind": "support.triage", "parent_id": None},
    ]
    callbacks = [{"job_id": "a", "key": "approve", "state": "timed_out"}]
    answers = {"W-1": {"since": 5.0, "opened": 108.0}}
    found = where_time_went(
        timings=TIMINGS,
        started_at=T0,
        acked={"W-1": "a", "C-1": "t"},
        jobs=jobs,
        events=events,
        callbacks=callbacks,
        answers=answers,
    )
    tail = found["drain_ended_with"]
    assert (tail["ref"], tail["kind"], tail["finished_at"]) == ("W-1", "demo.approval", 230.0)
    assert list(tail["spent"])[:2] == [
        "waiting: callback approve (timed_out)",
        "waiting for a worker (backlog, backoff, running cap)",
    ]
    assert tail["spent"]["waiting: callback approve (timed_out)"] == 123.0
    assert found["leases_left_to_expire"] == {"count": 1, "seconds": 5.0, "longest": 5.0}
    assert found["approvals_waiting_for_their_callback"] == {"count": 1, "longest": 103.0}
    rows = dict(summary({**slowest(TIMINGS), **found}))
    assert rows["slowest phase"] == "first drain: 210.0 s"
    assert rows["the first drain ended with"].startswith(
        "W-1 (demo.approval) at 230.0 s: waiting: callback approve (timed_out) 123.0 s"
    )
    assert rows["approvals: longest wait for the callback to open (backlog)"] == "103.0 s"
