"""The chaos report's count of leases held at once (app/tools/chaos/leases.py)."""

from __future__ import annotations

import datetime as dt

import pytest

from app.tools.chaos.leases import most_live_leases

pytestmark = pytest.mark.unit

T0 = dt.datetime(2026, 12, 4, tzinfo=dt.UTC)


def ev(job: str, seconds: float, to_state: str) -> dict[str, object]:
    return {"job_id": job, "at": T0 + dt.timedelta(seconds=seconds), "to_state": to_state}


def test_leases_that_overlap_are_counted_together_and_running_does_not_end_one() -> None:
    events = [
        ev("a", 0, "queued"),
        ev("a", 1, "leased"),
        ev("a", 2, "running"),
        ev("a", 5, "succeeded"),
        ev("b", 0, "queued"),
        ev("b", 3, "leased"),
        ev("b", 4, "running"),
        ev("b", 6, "retrying"),
        ev("c", 5, "leased"),  # a's end and c's start at one instant: not both at once
        ev("c", 7, "succeeded"),
    ]
    assert most_live_leases(events) == 2


def test_a_reclaim_after_a_kill_closes_the_old_lease_and_opens_one() -> None:
    events = [ev("a", 1, "leased"), ev("a", 9, "leased"), ev("a", 10, "succeeded")]
    events += [ev("b", 2, "leased"), ev("b", 3, "succeeded")]
    assert most_live_leases(events) == 2
    assert most_live_leases([]) == 0
