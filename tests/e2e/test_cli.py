"""The job and dead-letter commands as an operator runs them: `tasklease submit`, `jobs`,
`dlq`, `redrive`, `migrate` and `queues` as processes against the test's database and
queues (keys and limits are in test_auth_cli.py)."""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from tests.conftest import Stack, job_row
from tests.e2e.test_auth_cli import cli, finish, start

pytestmark = pytest.mark.e2e

# Text a job's error may hold that rich would read as markup: `[/]` closes nothing (rich
# raises), `[red]` would vanish into a colour.
MARKUP = "boom [/] [red]not a colour[/red] [bold]"


def submitted(stack: Stack, *args: str) -> uuid.UUID:
    code, out, err = cli(stack, "submit", "demo.noop", *args)
    assert code == 0, err
    return uuid.UUID(out.strip())


def dead_letter(sql: Any, job_id: uuid.UUID, error: str) -> None:
    """The job as the engine leaves it after its last attempt failed."""
    sql.execute(
        "UPDATE jobs SET state = 'dead_lettered', attempt = max_attempts, last_error = %s,"
        " dead_lettered_by = 'engine', finished_at = now() WHERE id = %s",
        (error, job_id),
    )


@pytest.mark.carrier_neutral  # the command's output, not the carrier
def test_submit_with_a_deadline_and_show_it(stack: Stack, sql: Any) -> None:
    job_id = submitted(stack, "--deadline-seconds", "3600")
    row = job_row(sql, job_id)
    assert (row["deadline"] - row["created_at"]).total_seconds() == 3600
    code, out, err = cli(stack, "jobs", "show", str(job_id))
    assert code == 0, err
    assert "deadline" in out and row["deadline"].strftime("%Y-%m-%d %H:%M:%S") in out
    code, out, err = cli(stack, "submit", "demo.noop", "--deadline", "2020-01-01T00:00:00Z")
    assert code != 0 and "deadline" in err and "past" in err, err


@pytest.mark.carrier_neutral  # the command's output, not the carrier
def test_submit_show_list_and_cancel_a_job(stack: Stack, sql: Any) -> None:
    job_id = submitted(stack, "--idempotency-key", "k1", "--tenant", "acme")
    # The same key: the same job, and a note on stderr only.
    code, out, err = cli(
        stack, "submit", "demo.noop", "--idempotency-key", "k1", "--tenant", "acme"
    )
    assert (code, out.strip()) == (0, str(job_id))
    assert "an earlier submission with this idempotency key" in err
    bad_json = start(stack, "submit", "demo.noop", "--payload", "{nope")
    bad_id = start(stack, "jobs", "show", "not-a-uuid")

    code, out, err = cli(stack, "jobs", "show", str(job_id))
    assert code == 0, err
    assert f"job {job_id}" in out
    for word in ("acme", "demo.noop", "queued", "timeline", "effects"):
        assert word in out

    code, out, err = cli(stack, "jobs", "list", "--tenant", "acme")
    assert code == 0, err
    assert "1 jobs" in out
    assert str(job_id) in out
    assert "0/" in out  # attempt/max_attempts

    code, out, err = cli(stack, "jobs", "cancel", str(job_id))
    assert code == 0, err
    assert out.strip() == f"job {job_id}: cancelled"
    assert sql.execute("SELECT state FROM jobs WHERE id = %s", (job_id,)).fetchone()["state"] == (
        "cancelled"
    )

    code, _, err = finish(bad_json)
    assert code == 2
    assert "--payload is not valid JSON" in err
    code, _, err = finish(bad_id)
    assert code == 2
    assert "not a job id: 'not-a-uuid'" in err


@pytest.mark.carrier_neutral  # the command's output, not the carrier
def test_jobs_show_lists_the_state_a_job_published_as_written(stack: Stack, sql: Any) -> None:
    job_id = submitted(stack, "--tenant", "acme")
    sql.execute(
        "INSERT INTO published_state (job_id, key, value, version, attempt) "
        "VALUES (%s, 'plan', %s::jsonb, 4, 2)",
        (job_id, f'{{"next": "{MARKUP}"}}'),
    )
    code, out, err = cli(stack, "jobs", "show", str(job_id))
    assert code == 0, err
    assert "state" in out and "plan" in out and MARKUP in out


@pytest.mark.carrier_neutral  # the command's output, not the carrier
def test_an_unknown_job_is_an_error_with_exit_code_1(stack: Stack) -> None:
    code, out, err = cli(stack, "jobs", "show", str(uuid.uuid4()))
    assert code == 1
    assert out == ""
    assert "error:" in err


def test_dead_letters_are_listed_and_redriven_with_their_errors_shown_as_written(
    stack: Stack, sql: Any
) -> None:
    job_id = submitted(stack)
    dead_letter(sql, job_id, MARKUP)

    # Every table prints the error as text: no markup is applied and none is an error.
    for args in (("jobs", "list"), ("jobs", "show", str(job_id)), ("dlq", "list")):
        code, out, err = cli(stack, *args)
        assert code == 0, (args, err)
        assert MARKUP in out, args

    code, out, err = cli(stack, "dlq", "list")
    assert "1 dead-lettered jobs" in out
    assert "messages in the DLQ: 0 visible, 0 in flight" in out

    code, out, err = cli(stack, "redrive", "--dry-run")
    assert code == 0, err
    assert "would redrive: 1 dead-lettered jobs selected" in out
    assert "dry run: nothing changed" in out
    assert MARKUP in out

    code, out, err = cli(stack, "redrive", "--job", str(job_id))
    assert code == 0, err
    assert "1 dead-lettered jobs selected" in out
    assert "summary" in out
    assert "sent anew (no dead letter found)" in out
    row = sql.execute("SELECT state, attempt FROM jobs WHERE id = %s", (job_id,)).fetchone()
    assert (row["state"], row["attempt"]) == ("queued", 0)


def test_migrate_is_idempotent_and_queues_create_prints_the_exports(stack: Stack) -> None:
    code, out, err = cli(stack, "migrate")
    assert code == 0, err
    assert out.strip() == "migrations applied: none (up to date)"

    name = f"cli-{uuid.uuid4().hex[:8]}"
    code, out, err = cli(stack, "queues", "create", "--name", name)
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0].startswith("export TASKLEASE_QUEUE_URL=") and lines[0].endswith(name)
    assert lines[1].startswith("export TASKLEASE_DLQ_URL=") and name in lines[1]


@pytest.mark.carrier_neutral  # the command's output, not the carrier
def test_a_command_without_its_settings_exits_2_naming_the_variable(stack: Stack) -> None:
    # migrate used to check its setting outside the runner: a traceback and exit code 1.
    stack.env.pop("TASKLEASE_DATABASE_URL")
    commands = ("migrate",), ("jobs", "list"), ("limits", "list"), ("submit", "demo.noop")
    for args in commands:
        code, out, err = cli(stack, *args)
        assert (code, out) == (2, ""), (args, err)
        assert "Traceback" not in err
        assert "configuration error" in err
        assert "TASKLEASE_DATABASE_URL" in err


@pytest.mark.carrier_neutral  # the command's output, not the carrier
def test_submit_takes_the_tenant_of_the_key_it_is_given_and_says_which(
    stack: Stack, sql: Any
) -> None:
    """Issue 30, item 2: without --tenant the CLI submitted as tenant 'default' while the
    key `make run` prints (and the web view, and `submit --wait`) is tenant 'demo': the
    job was invisible in the API and the page."""
    # Given the key a running `make run` hands a second shell (TASKLEASE_API_KEY)
    stack.env["TASKLEASE_API_KEY"] = stack.key("demo")
    code, out, err = cli(stack, "submit", "demo.noop")
    assert code == 0, err
    assert job_row(sql, uuid.UUID(out.strip()))["tenant"] == "demo"
    assert "tenant demo (the key's in $TASKLEASE_API_KEY)" in err
    # --tenant still decides when given
    code, out, err = cli(stack, "submit", "demo.noop", "--tenant", "acme")
    assert code == 0, err
    assert job_row(sql, uuid.UUID(out.strip()))["tenant"] == "acme"
    assert "tenant acme" in err
    # and with no key at all, it is the default tenant, said so
    del stack.env["TASKLEASE_API_KEY"]
    code, out, err = cli(stack, "submit", "demo.noop")
    assert code == 0, err
    assert job_row(sql, uuid.UUID(out.strip()))["tenant"] == "default"
    assert "tenant default (no --tenant, no key in $TASKLEASE_API_KEY)" in err
