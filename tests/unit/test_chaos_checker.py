"""The chaos checker on waiting work (issue 14): it must see a wait left stuck, a fan-out
whose result disagrees with its children, a second answer accepted, a nap woken early,
and pass the same run when nothing is wrong. Pure functions: facts in, report out."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest

from app.tools.chaos.checker import check, violated

pytestmark = pytest.mark.unit

T0 = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)


def at(seconds: float) -> dt.datetime:
    return T0 + dt.timedelta(seconds=seconds)


def job(job_id: str, kind: str, state: str = "succeeded", **extra: Any) -> dict[str, Any]:
    row = {
        "id": job_id,
        "kind": kind,
        "state": state,
        "attempt": 1,
        "max_attempts": 3,
        "payload": {},
        "result": None,
        "last_error": None,
        "redrives": 0,
        "parent_id": None,
        "spawn_key": None,
        "wait_kind": None,
        "wait_key": None,
        "wake_at": None,
        "wait_rule": None,
    }
    return {**row, **extra}


def effect(job_id: str, key: str, result: Any, seconds: float) -> dict[str, Any]:
    return {
        "job_id": job_id,
        "key": key,
        "attempt": 1,
        "result": result,
        "recorded_at": at(seconds),
    }


def done(job_id: str) -> list[dict[str, Any]]:
    """A timeline: accepted, run, waited, woken, finished once."""
    steps = [
        (None, "queued"),
        ("queued", "leased"),
        ("leased", "running"),
        ("running", "waiting"),
        ("waiting", "leased"),
        ("leased", "running"),
        ("running", "succeeded"),
    ]
    return [
        {"job_id": job_id, "at": at(i), "from_state": a, "to_state": b, "attempt": 1, "worker": "w"}
        for i, (a, b) in enumerate(steps)
    ]


def facts() -> dict[str, Any]:
    """One nap, one approval answered twice, one fan-out of two children (one failing for
    good, at least one needed): every job as it should be."""
    wake = at(5).isoformat()
    gathered = {"ok": True, "results": {"k0": {"naps": 1}}, "errors": {"k1": "x"}, "unfinished": []}
    jobs = [
        job("nap", "demo.nap", payload={"seconds": 4, "naps": 1}, result={"naps": 1}),
        job("ok", "demo.approval", result={"approved": True, "answer": {"a": 1}}),
        job(
            "fan",
            "demo.fanout",
            payload={"children": 2, "at_least": 1, "fail": [1]},
            result={"children": 2, "succeeded": 1, "failed": 1, "unfinished": 0},
        ),
        job("k0", "demo.nap", parent_id="fan", spawn_key="child-0", result={"naps": 1}),
        job(
            "k1",
            "demo.flaky",
            "dead_lettered",
            parent_id="fan",
            spawn_key="child-1",
            last_error="permanent: demo.flaky: permanent failure on purpose",
        ),
    ]
    effects = [
        effect("nap", "sleep:nap-0", wake, 1),
        effect("nap", "woke-0", "x", 6),
        effect("ok", "callback:approve", {}, 1),
        effect("ok", "notify:approve", {}, 1),
        effect("fan", "spawn:child-0", "k0", 1),
        effect("fan", "spawn:child-1", "k1", 1),
        effect("fan", "gather:children", gathered, 3),
        effect("k0", "sleep:nap-0", at(1).isoformat(), 1),
        effect("k0", "woke-0", "x", 2),
    ]
    events = [e for j in ("nap", "ok", "fan", "k0") for e in done(j)]
    return {
        "submitted": 3,
        "acked": {"W-0": "nap", "W-1": "ok", "W-2": "fan"},
        "tags": {},
        "redriven": [],
        "jobs": jobs,
        "events": events,
        "effects": effects,
        "duplicated_effect_rows": 0,
        "model_calls": [],
        "deliveries": [],
        "kills": [],
        "callbacks": [{"job_id": "ok", "key": "approve", "state": "succeeded"}],
        "plans": {"W-1": "answer twice"},
        "answers": {"W-1": {"first": "answered", "result": {"a": 1}, "second": "conflict"}},
        "now": at(60),
        "grace": 6,
        "delay_cap": 2,
    }


def test_a_run_with_every_wait_as_it_should_be_is_valid() -> None:
    report = check(**facts())
    assert report["unexpected_jobs"] == []
    assert (report["lost"], report["stuck_waits"], report["unexpected"]) == (0, 0, 0)
    assert report["waits"]["suspensions"] == 4
    assert report["waits"]["duplicate_answers_refused"] == 1
    assert report["waits"]["children_spawned"] == 2
    assert (report["waits"]["timers"], report["waits"]["timers_past_the_delay_cap"]) == (2, 1)
    assert not violated(report)


def test_waits_whose_condition_is_met_are_stuck_and_one_not_met_is_not() -> None:
    f = facts()
    rule = {"children": ["k0", "k1"], "need": 1, "all": False, "tolerate": 1}
    f["jobs"] += [
        job("cb", "demo.approval", "waiting", wait_kind="callback", wait_key="approve"),
        job("g", "demo.fanout", "waiting", wait_kind="children", wait_key="c", wait_rule=rule),
        job("t", "demo.nap", "waiting", wait_kind="timer", wait_key="nap-0", wake_at=at(50)),
        job("fine", "demo.nap", "waiting", wait_kind="timer", wait_key="nap-0", wake_at=at(57)),
    ]
    f["acked"] |= {"W-3": "cb", "W-4": "g", "W-5": "t", "W-6": "fine"}
    f["callbacks"] += [{"job_id": "cb", "key": "approve", "state": "succeeded"}]
    report = check(**f)
    assert sorted(s["job_id"] for s in report["stuck_wait_jobs"]) == ["cb", "g", "t"]
    assert report["lost"] == 0  # waiting for a condition not met yet is on its way
    assert violated(report)


def test_a_fanout_whose_result_disagrees_with_its_children_is_unexpected() -> None:
    f = facts()
    f["jobs"][3]["state"] = "dead_lettered"  # gathered as succeeded, now failed
    f["jobs"][3]["last_error"] = "permanent: x"
    report = check(**f)
    whys = [u["why"] for u in report["unexpected_jobs"]]
    assert any("gathered as succeeded is dead_lettered" in w for w in whys), whys
    assert any("its parent meant it to succeed" in w for w in whys), whys


def test_a_second_answer_accepted_and_a_nap_woken_early_are_unexpected() -> None:
    f = facts()
    f["answers"]["W-1"]["second"] = "answered"
    f["effects"][1] = effect("nap", "woke-0", "x", 4)  # due at 5 s
    report = check(**f)
    whys = [u["why"] for u in report["unexpected_jobs"]]
    assert report["waits"]["duplicate_answers_accepted"] == 1
    assert any("second answer to its callback was accepted" in w for w in whys), whys
    assert any("before it was due" in w for w in whys), whys
    assert violated(report)


def streamed(pieces: list[str], calls: int = 2, lost: int | None = None) -> dict[str, Any]:
    """A demo.write job killed mid-answer once and continued: ``pieces`` are its chunks."""
    from app.demos.triage.writing import fake_pieces, fake_text

    text = fake_text("p", 8)
    assert "".join(fake_pieces(text, 0)) == text
    f = facts()
    f["acked"] = {**f["acked"], "W-3": "w"}
    f["submitted"] = 4
    f["jobs"].append(
        job("w", "demo.write", payload={"prompt": "p", "words": 8}, result={"text": text})
    )
    f["effects"].append(effect("w", "answer", {"text": text}, 2))
    f["events"] += done("w")  # two runs
    f["chunks"] = [
        {"job_id": "w", "key": "answer", "seq": i, "text": p}
        for i, p in enumerate(pieces)
        if i != lost
    ]
    f["model_calls"] = [{"key": "w:answer", "outcome": "stream"}] * calls
    return f


def test_the_checker_sees_a_streamed_answer_with_a_gap_a_wrong_text_or_a_restart() -> None:
    from app.demos.triage.writing import fake_pieces, fake_text

    pieces = fake_pieces(fake_text("p", 8), 0)
    assert check(**streamed(pieces))["unexpected_jobs"] == []
    gap = check(**streamed(pieces, lost=3))["unexpected_jobs"]
    assert any("without a gap" in u["why"] for u in gap)
    assert any("not the fake's text" in u["why"] for u in gap)
    wrong = check(**streamed([*pieces[:-1], " oops."]))["unexpected_jobs"]
    assert [u["why"][:10] for u in wrong] == ["its chunks"]
    many = check(**streamed(pieces, calls=3))["unexpected_jobs"]
    assert [u["why"] for u in many] == ["3 model calls for its answer in 2 attempts"]
