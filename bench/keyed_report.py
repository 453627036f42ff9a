"""``make bench-keyed``'s figures over its rounds and its verdict (bench/keyed.py runs
them): the rounds combined, the ratio against its target, what fails the phase, and the
terminal's table."""

from __future__ import annotations

import statistics
from typing import Any

from rich.markup import escape
from rich.table import Table

KIND = "demo.turn"
TARGET_RATIO = 0.8


def combine(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """One side's runs over the rounds: counts summed, jobs/s the median of the rounds',
    the waits' percentiles over every job of every round."""
    total = {
        "jobs": sum(r["jobs"] for r in runs),
        "jobs_with_a_key": sum(r["jobs_with_a_key"] for r in runs),
        "seconds": round(sum(r["seconds"] for r in runs), 2),
        "jobs_per_s": round(statistics.median(r["jobs_per_s"] for r in runs), 1),
        "rounds_jobs_per_s": [r["jobs_per_s"] for r in runs],
        "pg_statements_per_job": round(
            statistics.median(r["pg_statements_per_job"] for r in runs), 2
        ),
        "pg_exec_ms_per_job": statistics.median(r.get("pg_exec_ms_per_job", 0.0) for r in runs),
        "pg_top_statements": runs[-1].get("pg_top_statements", []),
        "wait_for_a_claim_ms": percentiles([c for r in runs for c in r["_claims"]]),
    }
    if "_waits" in runs[0]:
        total |= {
            "keys": max(r["keys"] for r in runs),
            "keys_held_by_two_at_once": [t for r in runs for t in r["keys_held_by_two_at_once"]][
                :20
            ],
            "keys_held_by_two_count": sum(r["keys_held_by_two_count"] for r in runs),
            "waited_behind_their_key": sum(r["waited_behind_their_key"] for r in runs),
            "wait_for_a_free_slot_ms": percentiles([w for r in runs for w in r["_waits"]]),
        }
    return total


def percentiles(seconds: list[float]) -> dict[str, float | None]:
    if not seconds:
        return {"p50": None, "p95": None, "max": None}
    ms = sorted(s * 1000 for s in seconds)
    if len(ms) == 1:
        return {"p50": round(ms[0], 1), "p95": round(ms[0], 1), "max": round(ms[0], 1)}
    q = statistics.quantiles(ms, n=100, method="inclusive")
    return {"p50": round(q[49], 1), "p95": round(q[94], 1), "max": round(ms[-1], 1)}


def verdict(
    unkeyed: dict[str, Any], keyed: dict[str, Any], ratios: list[float] | None = None
) -> dict[str, Any]:
    """The ratio (the median of the rounds' ``ratios``, else of the two jobs/s) against
    its target, and what fails the phase."""
    ratio = round(
        statistics.median(ratios) if ratios else keyed["jobs_per_s"] / unkeyed["jobs_per_s"], 3
    )
    problems = []
    if keyed["keys_held_by_two_count"]:
        problems.append(f"{keyed['keys_held_by_two_count']} keys had two jobs holding them at once")
    if keyed["jobs_with_a_key"] != keyed["jobs"] or unkeyed["jobs_with_a_key"]:
        problems.append(
            f"keys: {keyed['jobs_with_a_key']} of {keyed['jobs']} keyed jobs have one, "
            f"{unkeyed['jobs_with_a_key']} of the unkeyed ones do"
        )
    if not keyed["waited_behind_their_key"]:
        problems.append("no job waited behind its key: the limit went untested")
    return {
        "ratio": ratio,
        "target": TARGET_RATIO,
        "met": ratio >= TARGET_RATIO,
        "problems": problems,
    }


def render(doc: dict[str, Any]) -> Table:
    k, u, v = doc["keyed"], doc["unkeyed"], doc["verdict"]
    t = Table(
        title=f"bench keyed: {doc['jobs_per_run']} {KIND} jobs over {k['keys']} keys, one "
        f"running per key; {doc['rounds']} rounds of each"
    )
    t.add_column("measure")
    t.add_column("value", justify="right")
    t.add_row(
        "without keys: jobs/s (median; rounds)", f"{u['jobs_per_s']}; {u['rounds_jobs_per_s']}"
    )
    t.add_row(
        "one per key: jobs/s (median; rounds)", f"{k['jobs_per_s']}; {k['rounds_jobs_per_s']}"
    )
    t.add_row(
        "ratio (median of the rounds'; target >= 0.8)",
        f"{v['ratio']} ({'met' if v['met'] else 'NOT met'}); {v.get('rounds', [])}",
    )
    for name, r in (("without keys", u), ("one per key", k)):
        t.add_row(
            f"{name}: PostgreSQL statements / execution ms per job",
            f"{r['pg_statements_per_job']} / {r['pg_exec_ms_per_job']}",
        )
    for name, r in (("without keys", u), ("one per key", k)):
        c = r["wait_for_a_claim_ms"]
        t.add_row(f"{name}: accepted → claimed p50 / p95 (ms)", f"{c['p50']} / {c['p95']}")
    w = k["wait_for_a_free_slot_ms"]
    t.add_row("jobs that waited behind their key", str(k["waited_behind_their_key"]))
    t.add_row("wait for a free slot p50 / p95 / max (ms)", f"{w['p50']} / {w['p95']} / {w['max']}")
    t.add_row("keys ever held by two at once", str(k["keys_held_by_two_count"]))
    for p in v["problems"]:
        t.add_row("[red]problem[/]", escape(p))
    return t
