"""`tasklease jobs watch`'s table and filters (app/cli/watch.py), from events as the API's
stream sends them: a row per job, the latest move first, values shown as written, a job
seen mid-flight marked as such, and `--kind` / `--state` letting through what they name.
The command itself runs against a real API in tests/e2e/test_jobs_watch.py."""

from __future__ import annotations

import datetime as dt
import uuid
from typing import Any

import pytest
from rich.console import Console

from app.cli import render_json, watch
from app.client import StreamEvent
from app.states import JobState

pytestmark = pytest.mark.unit

T0 = dt.datetime(2026, 12, 6, 8, 0, tzinfo=dt.UTC)


def event(
    job: uuid.UUID, n: int, kind: str, data: Any, *, type_: str = "transition", at: float = 0
) -> StreamEvent:
    return StreamEvent(
        id=f"{100 + n}-{n}",
        type=type_,  # type: ignore[arg-type]
        job_id=job,
        tenant="acme",
        kind=kind,
        at=T0 + dt.timedelta(seconds=at),
        attempt=1,
        data=data,
    )


def moved(job: uuid.UUID, n: int, frm: str | None, to: str, detail: str | None = None) -> Any:
    return event(job, n, "demo.sleep", {"from_state": frm, "to_state": to, "detail": detail})


def shown(board: watch.Board, seconds: float) -> str:
    console = Console(width=200, record=True, color_system=None)
    console.print(board.table(T0 + dt.timedelta(seconds=seconds)))
    return console.export_text()


def test_a_row_per_job_latest_move_first_values_as_written() -> None:
    a, b = uuid.uuid4(), uuid.uuid4()
    board = watch.Board("jobs moving", rows=10)
    board.see(moved(a, 1, None, "queued"))
    board.see(moved(a, 2, "queued", "leased"))
    board.see(moved(a, 3, "leased", "running"))
    # b was running before the watch began: its age and runs are "at least".
    board.see(moved(b, 4, "leased", "running"))
    board.see(moved(a, 5, "running", "dead_lettered", "boom [/] [red]not a colour[/red]"))
    text = shown(board, 75)
    lines = [line for line in text.splitlines() if str(a) in line or str(b) in line]
    assert [str(a) in lines[0], str(b) in lines[1]] == [True, True]  # a moved last
    assert "dead_lettered" in lines[0] and "1m15s" in lines[0] and "≥" not in lines[0]
    assert "boom [/] [red]not a colour[/red]" in lines[0]  # as written, never markup
    assert "running" in lines[1] and "≥1m15s" in lines[1] and "+1" in lines[1]
    assert "2 jobs, 5 events" in text


def test_the_oldest_move_leaves_the_table_past_its_rows() -> None:
    board = watch.Board("jobs moving", rows=2)
    jobs = [uuid.uuid4() for _ in range(3)]
    for n, job in enumerate(jobs):
        board.see(moved(job, n, None, "queued"))
    text = shown(board, 1)
    assert str(jobs[0]) not in text and str(jobs[1]) in text and str(jobs[2]) in text


def test_progress_output_and_state_are_said_in_a_few_words() -> None:
    job = uuid.uuid4()
    progress = event(job, 1, "k", {"fraction": 0.5, "note": "step 1"}, type_="progress")
    assert watch.detail(progress) == "progress 50% step 1"
    assert watch.detail(event(job, 2, "k", {"n": 1}, type_="output")) == 'output {"n": 1}'
    published = event(job, 3, "k", {"key": "phase", "value": "working"}, type_="state")
    assert watch.detail(published) == 'state phase = "working"'
    assert watch.detail(moved(job, 4, None, "queued", "accepted")) == "new → queued: accepted"


def test_kind_and_state_filters() -> None:
    job = uuid.uuid4()
    succeeded = moved(job, 1, "running", "succeeded")
    progress = event(job, 2, "demo.sleep", {"fraction": 1.0}, type_="progress")
    assert watch.wanted(succeeded, None, None) and watch.wanted(progress, None, None)
    assert watch.wanted(succeeded, "demo.sleep", JobState.SUCCEEDED)
    assert not watch.wanted(succeeded, "demo.noop", None)
    assert not watch.wanted(succeeded, None, JobState.RUNNING)
    assert not watch.wanted(progress, None, JobState.SUCCEEDED)  # not a transition


def test_json_lines_are_the_events_as_the_api_sends_them(
    capsys: pytest.CaptureFixture[str],
) -> None:
    job = uuid.uuid4()
    render_json.emit_line(moved(job, 1, None, "queued"))
    render_json.emit_line(event(job, 2, "demo.sleep", {"x": float("1e-7")}, type_="output"))
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 2
    assert lines[0].startswith('{"id": "101-1", "type": "transition", "job_id": "' + str(job))
    assert '"at": "2026-12-06T08:00:00Z"' in lines[0]
    with pytest.raises(ValueError, match="JSON compliant"):
        render_json.emit({"x": float("nan")})
