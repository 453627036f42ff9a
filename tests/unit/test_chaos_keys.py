"""The chaos checker on keyed work (app/tools/chaos/per_key.py, key_spans.py): the gate
must see two jobs of a key holding it at once, a debounced burst that ran another job
than its last (or ran a replaced one), a wait on a free key past the bound, and a run
that never met a held key or a debounce; and pass a run where each went right."""

from __future__ import annotations

import datetime as dt
import uuid
from typing import Any

from app.tools.chaos.checker import check, violated
from app.tools.chaos.key_spans import hand_off_waits, lives
from app.tools.chaos.per_key import key_check
from tests.unit.test_chaos_checker import job

T0 = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)


def at(seconds: float) -> dt.datetime:
    return T0 + dt.timedelta(seconds=seconds)


def ev(job_id: str, t: float, a: str | None, b: str, detail: str | None = None) -> dict[str, Any]:
    return {
        "job_id": job_id,
        "at": at(t),
        "from_state": a,
        "to_state": b,
        "attempt": 1,
        "worker": "w",
        "detail": detail,
    }


def ran(job_id: str, accepted: float, claimed: float, ended: float) -> list[dict[str, Any]]:
    return [
        ev(job_id, accepted, None, "queued", "accepted"),
        ev(job_id, claimed, "queued", "leased"),
        ev(job_id, claimed + 0.01, "leased", "running"),
        ev(job_id, ended, "running", "succeeded"),
    ]


def message(job_id: str, conversation: str = "c-1", state: str = "succeeded") -> dict[str, Any]:
    return job(job_id, "demo.converse", state, payload={"conversation": conversation})


def edit(job_id: str, state: str = "succeeded", attempt: int = 1) -> dict[str, Any]:
    return job(job_id, "demo.reindex", state, attempt=attempt, payload={"document": "d-1"})


def debounced(job_id: str, accepted: float) -> dict[str, Any]:
    runs_at = at(accepted + 2).isoformat(sep=" ")
    return ev(job_id, accepted, None, "waiting", f"accepted, debounced: runs at {runs_at} unless")


def replaced(job_id: str, accepted: float, by: str, when: float) -> list[dict[str, Any]]:
    return [
        debounced(job_id, accepted),
        ev(job_id, when, "waiting", "cancelled", f"debounced: replaced by job {by}, a newer job"),
    ]


def last(job_id: str, accepted: float, claimed: float) -> list[dict[str, Any]]:
    return [
        debounced(job_id, accepted),
        ev(job_id, claimed, "waiting", "leased", "woken: due"),
        ev(job_id, claimed + 0.01, "leased", "running"),
        ev(job_id, claimed + 0.2, "running", "succeeded"),
    ]


IDS = [str(uuid.UUID(int=i)) for i in range(1, 10)]


def keyed_world() -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Three messages to one conversation, each claimed as the one before ended; a
    burst of three edits (the last ran 2 s after it) and a later burst of one."""
    m1, m2, m3, e1, e2, e3, e4 = IDS[:7]
    jobs = [message(m1), message(m2), message(m3), edit(e1, "cancelled", 0)]
    jobs += [edit(e2, "cancelled", 0), edit(e3), edit(e4)]
    events = ran(m1, 0.0, 0.1, 1.0) + ran(m2, 0.0, 1.2, 2.0) + ran(m3, 0.05, 2.3, 3.0)
    events += replaced(e1, 0.0, e2, 0.1) + replaced(e2, 0.1, e3, 0.2) + last(e3, 0.2, 2.3)
    events += last(e4, 5.0, 7.1)
    return jobs, events


def run_check(
    jobs: list[dict[str, Any]], events: list[dict[str, Any]], **kw: Any
) -> tuple[dict[str, Any], list[tuple[str, str]]]:
    of: dict[str, list[dict[str, Any]]] = {}
    for e in events:
        of.setdefault(e["job_id"], []).append(e)
    return key_check(jobs, of, all_events=events, **kw)


def whole_check(
    jobs: list[dict[str, Any]], events: list[dict[str, Any]], **kw: Any
) -> dict[str, Any]:
    """The chaos checker over these jobs alone, all acknowledged, keyed work submitted."""
    return check(
        submitted=len(jobs),
        acked={f"r{i}": j["id"] for i, j in enumerate(jobs)},
        tags={},
        redriven=[],
        jobs=jobs,
        events=events,
        effects=[],
        duplicated_effect_rows=0,
        model_calls=[],
        deliveries=[],
        kills=[],
        keyed_submitted=True,
        **kw,
    )


def test_a_run_where_the_keys_held_passes_and_says_what_it_met() -> None:
    counts, findings = run_check(*keyed_world(), cap=4, bound=0.5)
    assert findings == []
    assert counts["problems"] == []
    assert (counts["keys"], counts["most_holding"], counts["behind_key"]) == (2, 1, 2)
    assert counts["hand_offs_checked"] == 2
    assert 0 < counts["longest_free_wait"] <= 0.3
    assert counts["debounce"] == {
        "jobs": 4,
        "replaced": 2,
        "bursts": 2,
        "bursts_of_one": 1,
        "ran": 2,
    }


def test_two_jobs_of_a_key_holding_it_at_once_are_found() -> None:
    jobs, events = keyed_world()
    m2 = IDS[1]
    events = [e for e in events if e["job_id"] != m2] + ran(m2, 0.0, 0.5, 2.0)
    _, findings = run_check(jobs, events)
    assert {j for j, why in findings if "held it at" in why} >= {IDS[0], m2}


def test_a_key_held_through_a_wait_and_a_retry_counts_as_held() -> None:
    # m1 waits on a timer after its claim, and is retried: it holds the key throughout,
    # so m2 claimed meanwhile is a second holder
    m1, m2 = IDS[:2]
    events = [
        ev(m1, 0.0, None, "queued", "accepted"),
        ev(m1, 0.1, "queued", "leased"),
        ev(m1, 0.2, "leased", "running"),
        ev(m1, 0.3, "running", "waiting"),
        ev(m1, 1.0, "waiting", "leased", "woken: due"),
        ev(m1, 1.1, "leased", "running"),
        ev(m1, 1.2, "running", "retrying"),
        ev(m1, 2.0, "retrying", "leased"),
        ev(m1, 2.5, "leased", "running"),
        ev(m1, 3.0, "running", "succeeded"),
        *ran(m2, 0.0, 1.5, 1.8),
    ]
    _, findings = run_check([message(m1), message(m2)], events)
    assert any("2 jobs of key 'c-1' held it" in why for _, why in findings), findings


def test_a_dead_letter_frees_its_key_and_its_redrive_takes_it_again() -> None:
    m1, m2 = IDS[:2]
    events = [
        ev(m1, 0.0, None, "queued", "accepted"),
        ev(m1, 0.1, "queued", "leased"),
        ev(m1, 0.5, "leased", "dead_lettered"),
        *ran(m2, 0.0, 0.6, 1.0),
        ev(m1, 2.0, "dead_lettered", "leased", "redriven"),
        ev(m1, 2.5, "leased", "succeeded"),
    ]
    counts, findings = run_check([message(m1), message(m2)], events)
    assert findings == [] and counts["most_holding"] == 1


def test_a_wait_on_a_free_key_past_the_bound_is_found_unless_a_fault_excuses_it() -> None:
    jobs, events = keyed_world()
    m3 = IDS[2]
    events = [e for e in events if e["job_id"] != m3] + ran(m3, 0.05, 9.0, 9.5)
    _, findings = run_check(jobs, events, cap=4, bound=5.0)
    assert [j for j, why in findings if "free slot" in why] == [m3]
    counts, findings = run_check(jobs, events, cap=4, bound=5.0, outages=[(at(4.0), at(4.5))])
    assert findings == [] and counts["hand_offs_excused"] == 1


def test_a_wait_while_the_tenant_is_at_its_cap_is_no_wait_on_the_key() -> None:
    # m3 waits long after m2 ended, but four other jobs of the tenant hold leases then
    jobs, events = keyed_world()
    m3 = IDS[2]
    events = [e for e in events if e["job_id"] != m3] + ran(m3, 0.05, 9.0, 9.5)
    others = [e for i in range(4) for e in ran(f"other-{i}", 0.0, 1.9, 8.9)]
    _, findings = run_check(jobs, events + others, cap=4, bound=5.0)
    assert findings == []
    _, findings = run_check(jobs, events + others, cap=6, bound=5.0)
    assert [j for j, why in findings if "free slot" in why] == [m3]


def test_a_later_job_claimed_first_means_the_slot_was_free_for_the_earlier_one() -> None:
    # m2 (submitted first) is claimed after m3: from m1's end m2 had the key's slot
    m1, m2, m3 = IDS[:3]
    events = ran(m1, 0.0, 0.1, 1.0) + ran(m3, 0.0, 1.1, 1.5) + ran(m2, 0.0, 8.0, 8.5)
    _, findings = run_check([message(m1), message(m2), message(m3)], events, cap=4, bound=5.0)
    assert [j for j, why in findings if "free slot" in why] == [m2]


def test_a_burst_that_ran_a_replaced_job_or_not_its_last_is_found() -> None:
    jobs, events = keyed_world()
    e1, e3 = IDS[3], IDS[5]
    # the replaced e1 ran too
    events_ran = [*events, ev(e1, 0.05, "waiting", "leased")]
    _, findings = run_check(jobs, events_ran)
    assert any(j == e1 and "never runs" in why for j, why in findings), findings
    # the last of the burst never ran
    no_last = [e for e in events if e["job_id"] != e3] + [debounced(e3, 0.2)]
    jobs_no_last = [j if j["id"] != e3 else edit(e3, "waiting", 0) for j in jobs]
    _, findings = run_check(jobs_no_last, no_last)
    assert any(j == e3 and "never ran" in why for j, why in findings), findings


def test_a_debounced_job_run_before_its_window_ended_is_found() -> None:
    jobs, events = keyed_world()
    e4 = IDS[6]
    events = [e for e in events if e["job_id"] != e4] + last(e4, 5.0, 6.0)
    _, findings = run_check(jobs, events)
    assert any(j == e4 and "before its window ended" in why for j, why in findings), findings


def test_a_job_replaced_by_no_job_of_its_key_is_found() -> None:
    jobs, events = keyed_world()
    e1 = IDS[3]
    events = [e for e in events if e["job_id"] != e1] + replaced(e1, 0.0, IDS[8], 0.1)
    _, findings = run_check(jobs, events)
    assert any(j == e1 and "not a job of its key" in why for j, why in findings), findings


def test_a_run_that_never_met_a_held_key_or_a_debounce_fails_the_gate() -> None:
    # each message submitted after the one before ended; no edit replaced
    m1, m2, e4 = IDS[0], IDS[1], IDS[6]
    jobs = [message(m1), message(m2), edit(e4)]
    events = ran(m1, 0.0, 0.1, 1.0) + ran(m2, 1.5, 1.6, 2.0) + last(e4, 5.0, 7.1)
    counts, findings = run_check(jobs, events)
    assert findings == []
    assert len(counts["problems"]) == 2, counts["problems"]
    report = whole_check(jobs, events)
    assert report["keys"]["problems"] and violated(report)


def test_the_wait_for_a_free_slot_runs_from_the_end_before_the_claim() -> None:
    jobs, events = keyed_world()
    of: dict[str, list[dict[str, Any]]] = {}
    for e in events:
        of.setdefault(e["job_id"], []).append(e)
    messages = [v for k, v in lives(jobs, of).items() if k in IDS[:3]]
    assert sorted(round(w, 3) for w in hand_off_waits(messages)) == [0.2, 0.3]


def test_the_whole_checker_takes_a_debounced_job_replaced_for_no_finding() -> None:
    report = whole_check(*keyed_world(), running_cap=4, key_bound=0.5)
    assert report["unexpected_jobs"] == [] and not violated(report)
    assert report["keys"]["debounce"]["replaced"] == 2
