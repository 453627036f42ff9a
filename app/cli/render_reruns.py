"""What `tasklease jobs show` prints of a job's re-runs and forks (app/services/reruns.py)."""

from __future__ import annotations

from typing import Any

from rich.text import Text

from app.cli import render
from app.cli.render import PlainTable


def origin(job: dict[str, Any]) -> Text | None:
    """Where a job came from, in one line (None: submitted, not re-run nor forked)."""
    if job.get("rerun_of") is not None:
        return Text(f"re-run of {job['rerun_of']}")
    if job.get("forked_from") is not None:
        step = job["fork_step"]
        where = "after its last recorded step" if step is None else f"at step {step!r}"
        return Text(f"forked from {job['forked_from']} {where}")
    return None


def made_from(rows: list[dict[str, Any]]) -> PlainTable:
    """The jobs re-run or forked from one job."""
    table = PlainTable("id", "how", "state", "created", title="re-runs and forks of this job")
    for r in rows:
        step = r["fork_step"]
        how = (
            "re-run"
            if r["rerun_of"] is not None
            else "fork after the last step"
            if step is None
            else f"fork from {step!r}"
        )
        table.add_row(r["id"], how, render.state(r["state"]), render.when(r["created_at"]))
    return table
