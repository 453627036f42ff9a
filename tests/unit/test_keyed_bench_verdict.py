"""The keyed bench phase's pure parts (bench/keyed.py): the two runs' jobs are the same
but for the key, and the phase fails when a key had two jobs holding it at once or no
job ever waited behind its key (the ratio is reported, its target said met or not)."""

from __future__ import annotations

from typing import Any

from bench.keyed import payloads
from bench.keyed_report import verdict


def run(jobs_per_s: float, **extra: Any) -> dict[str, Any]:
    return {"jobs": 10, "jobs_with_a_key": 0, "jobs_per_s": jobs_per_s, **extra}


def keyed_run(jobs_per_s: float, twice: int = 0, behind: int = 5) -> dict[str, Any]:
    return run(
        jobs_per_s,
        jobs_with_a_key=10,
        keys_held_by_two_count=twice,
        waited_behind_their_key=behind,
    )


def test_the_keyed_and_unkeyed_jobs_differ_only_by_their_key() -> None:
    keyed, plain = payloads(10, 3, seed=1, keyed=True), payloads(10, 3, seed=1, keyed=False)
    assert [{"n": p["n"]} for p in keyed] == plain
    assert sorted(p["n"] for p in plain) == list(range(10))
    assert {p["key"] for p in keyed} == {"k-0", "k-1", "k-2"}
    assert all(p["key"] == f"k-{p['n'] % 3}" for p in keyed)


def test_the_ratio_is_judged_against_its_target_without_failing_the_phase() -> None:
    v = verdict(run(100.0), keyed_run(79.0))
    assert (v["ratio"], v["met"], v["problems"]) == (0.79, False, [])
    assert verdict(run(100.0), keyed_run(80.0))["met"]


def test_two_jobs_holding_a_key_at_once_fail_the_phase() -> None:
    v = verdict(run(100.0), keyed_run(90.0, twice=2))
    assert v["problems"] == ["2 keys had two jobs holding them at once"]


def test_a_phase_where_no_job_waited_behind_its_key_fails() -> None:
    v = verdict(run(100.0), keyed_run(90.0, behind=0))
    assert v["problems"] == ["no job waited behind its key: the limit went untested"]
