"""What the CLI prints, without a database: tables show values as written (never as rich
markup), and the runner turns tasklease errors into messages and exit codes."""

from __future__ import annotations

import datetime
import io
import uuid
from typing import Any

import pytest
import typer
from rich.console import Console
from rich.table import Table

from app import errors
from app.cli import listings, render, render_admin, runner
from app.settings import config
from app.store.records import TenantUsage
from app.tools.chaos import report as chaos

pytestmark = pytest.mark.unit

MARKUP = "boom [/] [red]not a colour[/red] [bold]"
NOW = datetime.datetime(2026, 1, 2, 3, 4, 5, 678000, tzinfo=datetime.UTC)


def text(table: Table) -> str:
    buffer = io.StringIO()
    Console(file=buffer, width=400, color_system=None).print(table)
    return buffer.getvalue()


def job_row(**overrides: Any) -> dict[str, Any]:
    return {
        "id": uuid.uuid4(),
        "tenant": "acme",
        "kind": "demo.noop",
        "priority": "high",
        "state": "dead_lettered",
        "attempt": 3,
        "max_attempts": 3,
        "redrives": 0,
        "runs": 1,
        "lease_owner": None,
        "last_error": MARKUP,
        "created_at": NOW,
        "finished_at": NOW,
        "dead_lettered_by": "engine",
        "result": None,
        **overrides,
    }


def test_published_state_is_shown_as_written_and_cut_when_long() -> None:
    rows = [
        {"key": MARKUP, "value": {"plan": MARKUP}, "version": 3, "attempt": 2, "updated_at": NOW},
        {"key": "long", "value": "x" * 1000, "version": 1, "attempt": 1, "updated_at": NOW},
    ]
    shown = text(render.published_state(rows))
    assert shown.count(MARKUP) == 2  # the key, and the value's JSON
    assert "x" * (render.STATE_VALUE_CHARS - 2) + "…" in shown and "x" * 300 not in shown


def test_job_tables_show_an_error_that_looks_like_markup_as_written() -> None:
    row = job_row()
    assert MARKUP in text(listings.jobs([row]))
    assert MARKUP in text(listings.dead_letters([row], "dead"))
    shown = text(render.job(row["id"], row | {"result": {"tags": "[bold]x"}}))
    assert MARKUP in shown
    assert '{"tags": "[bold]x"}' in shown
    assert "priority" in shown and "high" in shown  # `jobs show` names the job's queue
    assert "kind version" in shown and "not recorded (started before versions were)" in shown
    assert "version 2026-06-01" in text(render.job(row["id"], row | {"kind_version": "2026-06-01"}))


def test_timeline_and_effects_escape_what_workers_wrote() -> None:
    event = {
        "at": NOW,
        "from_state": None,
        "to_state": "running",
        "attempt": 1,
        "worker": "w[1]",
        "detail": MARKUP,
    }
    shown = text(render.timeline([event]))
    assert "03:04:05.678" in shown
    assert MARKUP in shown
    assert "w[1]" in shown
    effect = {"seq": 1, "key": "[b]send", "attempt": 1, "worker": None, "recorded_at": NOW}
    assert "[b]send" in text(render.effects([effect]))


def test_keys_and_limits_tables_escape_names_and_mark_defaults() -> None:
    key = {
        "id": "0123456789ab",
        "tenant": "acme",
        "name": "[red]ops[/]",
        "admin": True,
        "created_at": NOW,
        "revoked_at": None,
    }
    shown = text(render_admin.keys([key], "1 API keys"))
    assert "[red]ops[/]" in shown
    assert "admin" in shown
    limit = TenantUsage(
        tenant="acme",
        rate_per_second=0.5,
        burst=None,
        max_in_flight=7,
        max_running=None,
        daily_tokens=500000,
        in_flight=2,
        running=1,
        parked=4,
    )
    shown = text(
        render_admin.limits(config.load(rate_limit_burst=100, max_running_per_tenant=3), [limit])
    )
    (line,) = [ln for ln in shown.splitlines() if "acme" in ln]
    assert [c.strip() for c in line.split("│") if c.strip()] == [
        "acme",
        "0.5",
        "100 (default)",
        "7",
        "2",
        "3 (default)",
        "1",
        "4",
        "500,000",
    ]


@pytest.mark.parametrize(
    ("error", "code", "prefix"),
    [
        (errors.ConfigError("TASKLEASE_X is [bad]"), 2, "configuration error: "),
        (errors.BadRequest("tenant '[x]' is not valid"), 1, "error: "),
    ],
)
def test_the_runner_turns_an_error_into_its_message_and_exit_code(
    error: errors.TaskleaseError, code: int, prefix: str, capsys: pytest.CaptureFixture[str]
) -> None:
    async def fail() -> None:
        raise error

    with pytest.raises(typer.Exit) as exited:
        runner.run(fail)
    assert exited.value.exit_code == code
    assert prefix + str(error) in capsys.readouterr().err


def test_the_runner_returns_what_the_command_awaited() -> None:
    async def answer() -> int:
        return 42

    assert runner.run(answer) == 42


def test_a_plain_table_shows_any_cell_as_written_so_no_caller_can_forget_to_escape() -> None:
    """Issue 13 item 4: the CLI's tables take text, never markup, by construction."""
    table = render.PlainTable("a", "b [bold]", title="t [/]")
    table.add_row(MARKUP, 7)
    shown = text(table)
    for written in (MARKUP, "b [bold]", "t [/]", "7"):
        assert written in shown


def test_a_list_of_jobs_narrower_than_its_table_keeps_each_id_whole() -> None:
    """Issue 13 item 5: one block per job when the table would cut the id or a word."""
    row = job_row()
    buffer = io.StringIO()
    Console(file=buffer, width=30, color_system=None).print(listings.jobs([row]), crop=False)
    lines = buffer.getvalue().splitlines()
    assert str(row["id"]) in lines
    assert "[red]not" in buffer.getvalue()


def chaos_report(why: str) -> dict[str, Any]:
    counts = dict.fromkeys(
        ("submitted", "acknowledged", "succeeded", "dead_lettered", "cancelled"), 1
    )
    return {
        **counts,
        **dict.fromkeys(("lost", "duplicated_effects", "duplicated_completions", "stuck_waits"), 0),
        "unexpected": 1,
        "duplicated_effect_rows": 0,
        "duplicated_deliveries": 0,
        "effect_window_repeats": 0,
        "model_calls": {
            "ok_per_effect_mean": 1,
            "ok_per_effect_max": 1,
            "calls_per_effect_mean": 1,
            "calls_per_effect_max": 1,
            "by_outcome": {"ok": 1},
            "ok_repeats_after_a_kill": 0,
            "ok_repeats_otherwise": 0,
        },
        "waits": {
            "suspensions": 0,
            "woken_when_due": 0,
            "woken_by_answer_or_children": 0,
            "callbacks_answered": 0,
            "duplicate_answers_refused": 0,
            "duplicate_answers_accepted": 0,
            "callbacks_timed_out": 0,
            "children_spawned": 0,
        },
        "by_kind": {},
        "dead_letters_after_first_drain": 0,
        "redriven": 0,
        "dead_lettered_by_cause": {},
        "faults": {"kills": 0, "sqs_restarts": 0, "pg_restarts": 0, "unbidden_exits": []},
        "timings": {},
        "unexpected_jobs": [{"ref": "C-[b]1", "job_id": "j", "why": why}],
        "lost_jobs": [],
        "stuck_wait_jobs": [],
    }


def test_the_chaos_report_shows_a_reason_that_looks_like_markup_as_written() -> None:
    """Issue 13 item 4: `tagged [permanent] but succeeded` lost its `[permanent]`."""
    shown = text(chaos.render(chaos_report("tagged [permanent] but succeeded [/]")))
    assert "C-[b]1 j: tagged [permanent] but succeeded [/]" in shown
    assert "INVALID" in shown
