"""The checker on the deploy of a kind's second version half-way through the faults
(demo.revised: app/demos/revised.py, docs/explain/chaos.md). Pure: the witnesses in,
what was broken out.

Each demo.revised job must have succeeded (the change is compatible: no replay diverged),
with the version it first started on recorded; its result's flags agree with its record
(``review`` recorded iff reviewed, ``notify`` iff notified, and each one's marker
``patch:review``/``patch:notify`` iff its branch ran); and no ``patch:review`` marker is
recorded after ``draft``: a job that drafted on version 1 never took the review.
Effects never twice is checked for every job (checker.py)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from app.demos.revised import DRAFT, KIND, NOTIFY, REVIEW
from app.states import JobState

VERSIONS = ("1", "2")
# (the result's flag, the branch's effect, its marker)
BRANCHES = (("reviewed", REVIEW, f"patch:{REVIEW}"), ("notified", NOTIFY, f"patch:{NOTIFY}"))


def revised_findings(job: Mapping[str, Any], effects: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """What is wrong with one demo.revised job (``effects``: its rows by key)."""
    if job["state"] != JobState.SUCCEEDED:
        return [f"a job of the deployed kind ended {job['state']}: {job['last_error']!r}"]
    started = job.get("kind_version")
    result = job["result"] or {}
    ran = str(result.get("version"))
    found = []
    if started not in VERSIONS:
        found.append(f"its first version recorded as {started!r}, not one of {VERSIONS}")
    if ran not in VERSIONS or (started == "2" and ran == "1"):
        found.append(f"started on version {started}, finished on version {ran}")
    for flag, effect, marker in BRANCHES:
        took = bool(result.get(flag))
        for key in (effect, marker):
            if (key in effects) != took:
                said = "recorded" if key in effects else "not recorded"
                found.append(f"{flag} is {took} but {key!r} is {said}")
    review, draft = effects.get(BRANCHES[0][2]), effects.get(DRAFT)
    if review is not None and (draft is None or review["seq"] > draft["seq"]):
        found.append("the review's marker was recorded after the draft: it took the review late")
    return found


def version_check(
    jobs: Sequence[Mapping[str, Any]], effects_of: Mapping[str, Mapping[str, Mapping[str, Any]]]
) -> tuple[dict[str, Any], list[tuple[str, str]]]:
    """(counts for the report, (job id, what) for each finding) over the demo.revised jobs."""
    revised = [j for j in jobs if j.get("kind") == KIND]
    findings = [
        (j["id"], why) for j in revised for why in revised_findings(j, effects_of.get(j["id"], {}))
    ]
    done = [j for j in revised if j["state"] == JobState.SUCCEEDED]

    def count(started: str, ran: str) -> int:
        return sum(
            1
            for j in done
            if (j.get("kind_version"), (j["result"] or {}).get("version")) == (started, ran)
        )

    counts = {
        "jobs": len(revised),
        "succeeded": len(done),
        "v1_to_v1": count("1", "1"),
        "v1_to_v2": count("1", "2"),
        "v2_to_v2": count("2", "2"),
        "reviewed": sum(1 for j in done if (j["result"] or {}).get("reviewed")),
        "notified": sum(1 for j in done if (j["result"] or {}).get("notified")),
    }
    return counts, findings
