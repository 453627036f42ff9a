"""`tasklease schedules create|list|pause|resume|delete` as an operator runs them, against
the test's database: the id alone on stdout, tables that show text as written, exit codes."""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from tests.conftest import Stack
from tests.e2e.test_auth_cli import cli, finish, start

# carrier_neutral: the schedules' commands and rows; a schedule's firing is checked on every
# carrier by tests/integration/test_schedules.py.
pytestmark = [pytest.mark.e2e, pytest.mark.carrier_neutral]

# A name rich would read as markup: `[/]` closes nothing (rich raises), `[red]` a colour.
MARKUP = "digest [/] [red]not a colour[/red]"


def test_create_list_pause_resume_delete(stack: Stack, sql: Any) -> None:
    code, out, err = cli(
        stack,
        "schedules",
        "create",
        "--cron",
        "0 9 * * 1-5",
        "--tz",
        "Europe/Berlin",
        "--kind",
        "demo.sleep",
        "--payload",
        '{"seconds": 0}',
        "--name",
        MARKUP,
        "--tenant",
        "acme",
    )
    assert code == 0, err
    schedule_id = uuid.UUID(out.strip())  # the id alone on stdout
    assert "At 09:00 on Monday through Friday" in err  # the table, on stderr
    assert MARKUP in err
    bad_cron = start(stack, "schedules", "create", "--cron", "61 * * * *", "--kind", "demo.noop")
    bad_tz = start(
        stack,
        "schedules",
        "create",
        "--cron",
        "* * * * *",
        "--tz",
        "Nowhere",
        "--kind",
        "demo.noop",
    )
    bad_id = start(stack, "schedules", "pause", "nope")

    code, out, err = cli(stack, "schedules", "list")
    assert code == 0, err
    assert "1 schedules" in out
    for text in (str(schedule_id), MARKUP, "acme", "0 9 * * 1-5", "Europe/Berlin", "enabled"):
        assert text in out
    assert " 09:00 CE" in out  # the next slot, on the schedule's clock (CET or CEST)

    code, out, err = cli(stack, "schedules", "pause", str(schedule_id))
    assert (code, out.strip()) == (0, f"schedule {schedule_id}: paused"), err
    code, out, err = cli(stack, "schedules", "list", "--tenant", "acme")
    assert "paused" in out, err
    assert cli(stack, "schedules", "list", "--tenant", "globex")[1].startswith("0 schedules")

    code, out, err = cli(stack, "schedules", "resume", str(schedule_id))
    assert code == 0, err
    assert "enabled" in out
    assert "09:00" in out

    code, out, err = cli(stack, "schedules", "delete", str(schedule_id))
    assert (code, out.strip()) == (0, f"schedule {schedule_id}: deleted"), err
    assert sql.execute("SELECT count(*) AS n FROM schedules").fetchone()["n"] == 0
    code, out, err = cli(stack, "schedules", "delete", str(schedule_id))
    assert (code, out) == (1, "")
    assert f"no schedule {schedule_id}" in err

    code, out, err = finish(bad_cron)
    assert (code, out) == (1, "")
    assert "cron: Bad minute" in err
    code, out, err = finish(bad_tz)
    assert (code, out) == (1, "")
    assert "timezone: 'Nowhere'" in err
    code, _, err = finish(bad_id)
    assert code == 2
    assert "not a schedule id: 'nope'" in err
