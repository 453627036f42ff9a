"""What a waiting job shows it waits for, without a database: the API's ``waiting_for``
(app/services/jobs.py) and the line `jobs show` prints for it (app/cli/render.py)."""

from __future__ import annotations

import datetime
import uuid
from typing import Any

import pytest

from app.cli import render
from app.services import jobs

pytestmark = pytest.mark.unit

DUE = datetime.datetime(2026, 12, 24, 18, 0, tzinfo=datetime.UTC)


def waiting(**wait: Any) -> dict[str, Any]:
    return {"state": "waiting", "wait_key": None, "wake_at": None, "wait_rule": None, **wait}


def test_a_job_that_does_not_wait_waits_for_nothing() -> None:
    assert jobs.waiting_for({**waiting(wait_kind="timer"), "state": "queued"}) is None


def test_a_delayed_submission_waits_on_its_run_at_timer() -> None:
    w = jobs.waiting_for(waiting(wait_kind="timer", wait_key="run_at", wake_at=DUE))
    assert w == {"kind": "timer", "key": "run_at", "until": DUE, "rule": None}
    assert render.waiting(w) == "timer run_at until 2026-12-24 18:00:00"


def test_a_gather_shows_its_rule_and_how_many_children_not_their_ids() -> None:
    kids = [str(uuid.uuid4()) for _ in range(5)]
    some = {"children": kids, "need": 3, "all": False, "tolerate": 1}
    w = jobs.waiting_for(waiting(wait_kind="children", wait_key="fan", wait_rule=some))
    assert w is not None
    assert w["rule"] == {"need": 3, "all": False, "tolerate": 1, "count": 5}
    assert render.waiting(w) == "children fan (at least 3 of 5, tolerating 1)"
    every = {"children": kids, "need": None, "all": True, "tolerate": 0}
    w = jobs.waiting_for(waiting(wait_kind="children", wait_key="fan", wait_rule=every))
    assert w is not None
    assert render.waiting(w) == "children fan (all 5, tolerating 0)"


def test_a_callback_shows_its_key_and_deadline() -> None:
    w = jobs.waiting_for(waiting(wait_kind="callback", wait_key="approve", wake_at=DUE))
    assert w is not None
    assert render.waiting(w) == "callback approve until 2026-12-24 18:00:00"
