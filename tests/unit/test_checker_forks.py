"""The invariant checker on a fork (issue 33): the steps a fork inherited were written under
its original's claims and asked of the model as the original, so they are checked there,
not held against the fork; the same rows written by the fork itself are violations."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest

from app.tools.chaos.checker import TRIAGE, Outside, job_violations

pytestmark = pytest.mark.unit

T0 = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
FORK = "fork-1"


def at(seconds: float) -> dt.datetime:
    return T0 + dt.timedelta(seconds=seconds)


def row() -> dict[str, Any]:
    return {
        "state": "succeeded",
        "kind": TRIAGE,
        "payload": {},
        "request_hash": "h",
        "result": {"delivered": True},
        "finished_at": at(12),
        "attempt": 1,
        "lease_owner": "w2",
        "lease_token": None,
        "lease_expires_at": None,
        "last_error": None,
        "dead_lettered_by": None,
    }


def events() -> list[dict[str, Any]]:
    steps = [(None, "queued", 0, None), ("queued", "leased", 1, "w2"),
             ("leased", "running", 1, "w2"), ("running", "succeeded", 1, "w2")]  # fmt: skip
    return [
        {"id": i, "at": at(10 + i), "from_state": a, "to_state": b, "attempt": n, "worker": w}
        for i, (a, b, n, w) in enumerate(steps)
    ]


def effects(inherited_from: str | None) -> list[dict[str, Any]]:
    return [
        # Recorded by the original's attempt 1 on w1, before the fork existed.
        {"key": "triage", "attempt": 1, "worker": "w1", "recorded_at": at(1),
         "result": {"label": "bug"}, "inherited_from": inherited_from},
        {"key": "post", "attempt": 1, "worker": "w2", "recorded_at": at(11.5),
         "result": {"delivered": True}, "inherited_from": None},
    ]  # fmt: skip


def outside() -> Outside:
    # The model was asked once, as the original; the webhook got the fork's post once.
    return Outside(ok_calls={"orig:triage": 1}, delivered={f"{FORK}:post": 1})


def test_a_forks_inherited_steps_break_no_invariant() -> None:
    found = job_violations(FORK, row(), events(), effects("orig"), 1, outside())
    assert found == []


def test_the_same_steps_written_by_the_fork_itself_are_violations() -> None:
    found = job_violations(FORK, row(), events(), effects(None), 1, outside())
    assert any(f.startswith("3: effect 'triage' written by attempt 1 (w1)") for f in found), found
    assert any("model never answered" in f for f in found), found
