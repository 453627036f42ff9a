"""`tasklease dev` (make run) refuses a TASKLEASE_KINDS module that does not import
before it starts anything, naming it (instead of an API that dies into its log); its
demo table shows a tenant's text as text; its state file gives way to the environment."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest
from rich.console import Console

from app.settings import config
from app.tools.stack import dev

pytestmark = pytest.mark.unit


def test_a_kinds_module_that_does_not_import_stops_make_run_naming_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    settings = config.load(kinds="tests.no_such_kinds_module")
    code = dev.main(
        settings,
        workers=1,
        api_port=1,
        data_dir=tmp_path / "data",
        demo=True,
        exit_when_done=True,
    )
    assert code == 2
    assert "tests.no_such_kinds_module" in capsys.readouterr().out
    assert not (tmp_path / "data" / "pgdata").exists()  # nothing was started


def test_the_demo_table_shows_markup_looking_ticket_text_as_text() -> None:
    """Issue 13 item 4 (in make run's table): a ticket id or an error that looks like rich
    markup is shown as written, never interpreted (nor a MarkupError)."""
    from app.tools.stack import demo

    job = {
        "id": "0b7c2a4e-1c2d-4e5f-8a9b-0c1d2e3f4a5b",
        "payload": {"ticket_id": "refund [/] please [red]now"},
        "state": "dead_lettered",
        "attempt": 1,
        "max_attempts": 3,
        "runs": 1,
        "result": None,
        "last_error": "[permanent] refused",
    }
    screen = Console(width=200, record=True)
    screen.print(demo._table([job], 1.0, ""))
    text = screen.export_text()
    assert "refund [/] please [red]now" in text
    assert "[permanent] refused" in text
    assert "0b7c2a4e-1c2d-4e5f-8a9b-0c1d2e3f4a5b" in text


def test_the_demo_table_shows_runs_and_attempts_used_as_the_api_counts_them() -> None:
    """Issue 30 item 9: a job that ran twice and waits showed "0/3" under "attempt", as
    if it had never run. Its runs (2) and its attempts used (none: waits give them back)
    are two columns, as the job's JSON counts them."""
    from app.tools.stack import demo

    job = {
        "id": "0b7c2a4e-1c2d-4e5f-8a9b-0c1d2e3f4a5b",
        "kind": "agent.research",
        "payload": {"topic": "t"},
        "state": "waiting",
        "attempt": 0,
        "max_attempts": 3,
        "runs": 2,
        "result": None,
        "last_error": None,
    }
    screen = Console(width=200, record=True)
    screen.print(demo._table([job], 1.0, ""))
    header, row = (
        [c.strip() for c in re.split("[│┃]", line.strip("│┃ "))]
        for line in screen.export_text().splitlines()
        if line.startswith(("│", "┃"))
    )
    shown = dict(zip(header, row, strict=True))
    assert (shown["runs"], shown["attempts used"]) == ("2", "0/3"), shown


def test_a_deployment_named_in_the_environment_wins_over_the_state_file(tmp_path: Path) -> None:
    """Issue 13 item 6: the running make run's settings are used only when the environment
    names no database or queue of its own; its SQS endpoint comes with its queues."""
    from app.tools.stack import state

    data = tmp_path / ".tasklease"
    saved = {
        "TASKLEASE_DATABASE_URL": "postgresql://dev/db",
        "TASKLEASE_QUEUE_URL": "http://127.0.0.1:9324/q",
        "AWS_ENDPOINT_URL_SQS": "http://127.0.0.1:9324",
        "TASKLEASE_API_KEY": "tlk_demo",
    }
    state.write(data, saved)
    assert (state.path(data).stat().st_mode & 0o777) == 0o600
    own = {"TASKLEASE_DATABASE_URL": "postgresql://prod/db"}
    assert state.apply(own, data) is None
    assert own == {"TASKLEASE_DATABASE_URL": "postgresql://prod/db"}
    shell = {
        "AWS_ENDPOINT_URL_SQS": "https://sqs.eu-west-1.amazonaws.com",
        "TASKLEASE_API_KEY": "mine",
    }
    note = state.apply(shell, data)
    assert note is not None and "using the running `make run` stack's settings" in note
    assert shell["TASKLEASE_DATABASE_URL"] == "postgresql://dev/db"
    assert shell["AWS_ENDPOINT_URL_SQS"] == "http://127.0.0.1:9324"
    assert shell["TASKLEASE_API_KEY"] == "mine"  # the caller's own key is kept


def test_the_approval_lines_are_pasteable_and_printed_as_written(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Issue 14: the lines that approve the demo's research job come from the webhook's
    notice (outside text): printed whole and escaped, quoted for a shell."""
    from app.tools.stack import demo, state

    url = "http://127.0.0.1:8000/v1/callbacks/tlcb_abc-_1"
    curl, cli = demo.approve_lines(url, "tlcb_abc-_1")
    assert curl == (
        "curl -X POST http://127.0.0.1:8000/v1/callbacks/tlcb_abc-_1 "
        """-H 'content-type: application/json' -d '{"result": {"approved": true}}'"""
    )
    assert (
        cli
        == f"""{state.cli_name()} callbacks complete tlcb_abc-_1 --result '{{"approved": true}}'"""
    )
    odd = demo.approve_lines("http://h/v1/callbacks/[red]x y", "[red]x y")
    assert "'http://h/v1/callbacks/[red]x y'" in odd[0] and "'[red]x y'" in odd[1]

    screen = Console(width=60, record=True)
    monkeypatch.setattr(demo, "console", screen)
    demo.print_approval("job-[bold]1", "http://h/v1/callbacks/[red]x", "[red]x")
    text = screen.export_text()
    assert "the research job job-[bold]1 waits for approval" in text
    assert "  curl -X POST 'http://h/v1/callbacks/[red]x' -H" in text  # whole, not wrapped
    assert f"  {state.cli_name()} callbacks complete '[red]x' --result" in text


def test_the_hints_name_the_cli_a_new_shell_can_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 30, item 3: `make run`'s hints said `uv run tasklease …`, which a new shell
    cannot run where the Makefile put uv in ~/.local/bin; they name the virtual
    environment's script, relative to the checkout, as the docs' second-shell block does."""
    from app.tools.stack import state

    bin_dir = tmp_path / ".venv" / "bin"
    bin_dir.mkdir(parents=True)
    monkeypatch.setattr(sys, "executable", str(bin_dir / "python"))
    monkeypatch.chdir(tmp_path)
    assert state.cli_name() == "tasklease"  # no script: the one on PATH
    (bin_dir / "tasklease").write_text("#!/bin/sh\n")
    assert state.cli_name() == ".venv/bin/tasklease"
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    assert state.cli_name() == str(bin_dir / "tasklease")
