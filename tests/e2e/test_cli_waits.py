"""The waits at the command line, as an operator runs them against the test's database and
queues: `submit --delay/--run-at`, `jobs show` and `jobs list --state waiting` of waiting
jobs, and `callbacks complete|heartbeat` by token or by job and key."""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import re
import uuid
from typing import Any

import pytest

from app.services import callbacks
from app.states import JobState
from tests.conftest import Stack, job_row, wait_for
from tests.e2e.test_auth_cli import cli, finish, start
from tests.helpers import engine_for, receive_records

# carrier_neutral: what these check is the command line's view of waits; the waits
# themselves are checked on every carrier by tests/integration/test_waits*.py and test_api_messages.py.
pytestmark = [pytest.mark.e2e, pytest.mark.carrier_neutral]


def ok_id(answer: tuple[int, str, str]) -> str:
    code, out, err = answer
    assert code == 0, err
    return str(uuid.UUID(out.strip()))


def submitted(stack: Stack, *args: str) -> str:
    return ok_id(cli(stack, "submit", *args))


async def handle_once(stack: Stack) -> None:
    async with engine_for(stack.settings) as engine:
        records = await receive_records(engine, wait=2)
        await engine.handle({"Records": records}, None)


def test_an_operator_sees_a_waiting_job_and_answers_its_callback_by_job_and_key(
    stack: Stack, sql: Any
) -> None:
    job_id = submitted(stack, "demo.approval", "--payload", '{"timeout_seconds": 600}')
    asyncio.run(handle_once(stack))
    assert job_row(sql, job_id)["state"] == JobState.WAITING
    # Refused before anything is looked up: exit 2, saying what is wrong.
    usage = [
        start(stack, "callbacks", "complete", "--result", "1"),
        start(stack, "callbacks", "complete", "tok", "--job", job_id, "--key", "approve"),
        start(stack, "callbacks", "complete", "--job", job_id, "--key", "approve"),
        start(
            stack, "callbacks", "complete", "--job", job_id, "--key", "approve", "--result", "{nope"
        ),
        start(stack, "callbacks", "complete", "--job", "not-an-id", "--key", "k", "--result", "1"),
    ]
    unknown = [
        start(stack, "callbacks", "complete", callbacks.TOKEN_PREFIX + "nope", "--result", "1"),
        start(stack, "callbacks", "heartbeat", callbacks.TOKEN_PREFIX + "nope"),
    ]

    show = start(stack, "jobs", "show", job_id)
    listing = start(stack, "jobs", "list", "--state", "waiting")
    code, out, err = cli(stack, "callbacks", "heartbeat", "--job", job_id, "--key", "approve")
    assert code == 0, err
    assert "new deadline:" in out
    code, out, err = finish(show)
    assert code == 0, err
    assert "waiting for" in out and "callback approve until" in out
    assert "callbacks" in out and "pending" in out
    assert "approve this demo job" in out  # what it asks (its details)
    code, out, err = finish(listing)
    assert code == 0, err
    assert job_id in out and "1 jobs" in out
    code, out, err = cli(
        stack, "callbacks", "complete", "--job", job_id, "--key", "approve", "--result", '{"ok":1}'
    )
    assert code == 0, err
    # The callback's state, said as the callback's (issue 30, item 10): not the job's.
    assert out.strip() == (
        f"callback approve of job {job_id}: the callback succeeded, the job is woken"
    )
    assert job_row(sql, job_id)["state"] == JobState.QUEUED
    code, out, err = cli(
        stack, "callbacks", "complete", "--job", job_id, "--key", "approve", "--error", "late"
    )
    assert code == 1 and out == ""
    assert "callback already answered (succeeded)" in err

    expected = [
        "give the callback's TOKEN, or --job ID and --key KEY",
        "give a TOKEN, or --job and --key, not both",
        "give --result JSON or --error MESSAGE (exactly one)",
        "--result is not valid JSON",
        "not a job id: 'not-an-id'",
    ]
    for proc, says in zip(usage, expected, strict=True):
        code, _, err = finish(proc)
        assert code == 2 and says in err, (says, err)
    for proc in unknown:
        code, _, err = finish(proc)
        assert code == 1 and "no such callback, or it is past its deadline" in err, err
    (cb,) = sql.execute("SELECT state, heartbeats, result FROM callbacks").fetchall()
    assert (cb["state"], cb["heartbeats"], cb["result"]) == ("succeeded", 1, {"ok": 1})


def test_delayed_submission_and_a_parents_children_at_the_command_line(
    stack: Stack, sql: Any
) -> None:
    bad = [
        start(stack, "submit", "demo.noop", "--run-at", "2030-01-01T00:00:00"),
        start(stack, "submit", "demo.noop", "--delay", "5", "--run-at", "2030-01-01T00:00:00Z"),
    ]
    run_at = (dt.datetime.now(dt.UTC) + dt.timedelta(days=30)).replace(microsecond=0)
    fanout = '{"children": 2, "at_least": 1, "child_seconds": 60}'
    submits = [
        start(stack, "submit", "demo.noop", "--delay", "600"),
        start(stack, "submit", "demo.noop", "--run-at", run_at.isoformat()),
        start(stack, "submit", "demo.fanout", "--payload", fanout),
    ]
    later, at, parent = (ok_id(finish(proc)) for proc in submits)
    asyncio.run(handle_once(stack))
    rows = {j: job_row(sql, j) for j in (later, at, parent)}
    assert all(r["state"] == JobState.WAITING for r in rows.values()), rows
    assert rows[later]["wake_sent_at"] is not None and rows[at]["wake_sent_at"] is None

    kids = [r["id"] for r in sql.execute("SELECT id FROM jobs WHERE parent_id = %s", (parent,))]
    shows = [start(stack, "jobs", "show", j) for j in (at, parent, str(kids[0]))]
    code, out, err = finish(shows[0])
    assert code == 0, err
    assert f"timer run_at until {run_at:%Y-%m-%d %H:%M:%S}" in out
    code, out, err = finish(shows[1])
    assert code == 0, err
    assert "children (at least 1 of 2" in out and "2 children" in out
    assert len(kids) == 2 and all(str(k) in out for k in kids)
    code, out, err = finish(shows[2])
    assert code == 0, err
    assert "parent" in out and parent in out

    expected = ["needs a time zone", "not both"]
    for proc, says in zip(bad, expected, strict=True):
        code, _, err = finish(proc)
        assert code == 2 and says in err, (says, err)
    assert sql.execute("SELECT count(*) AS n FROM jobs").fetchone()["n"] == 5  # 3 + 2 kids


def log_lines(text: str) -> list[dict[str, Any]]:
    """The structured log lines in ``text`` (app/logs.py: one JSON object a line)."""
    found = []
    for line in text.splitlines():
        try:
            doc = json.loads(line)
        except ValueError:
            continue
        if isinstance(doc, dict) and {"at", "level", "msg"} <= doc.keys():
            found.append(doc)
    return found


def test_operator_commands_print_log_lines_only_with_verbose_and_servers_always(
    stack: Stack, sql: Any
) -> None:
    approval = ("demo.approval", "--payload", '{"timeout_seconds": 600}')
    quiet, short, long = (submitted(stack, *approval) for _ in range(3))
    # A server command logs as it always did, no -v needed: the worker's own lines.
    worker = start(stack, "worker")
    try:
        wait_for(
            lambda: all(job_row(sql, j)["state"] == JobState.WAITING for j in (quiet, short, long)),
            what="three jobs waiting",
        )
    finally:
        worker.terminate()
    _, _, err = finish(worker)
    said = [d["msg"] for d in log_lines(err)]
    # A job's claimed and running lines are DEBUG's; its wait (how the attempt ended) is INFO's.
    assert "worker polling" in said and any(m.startswith("waiting for") for m in said), err

    answer = ("--key", "approve", "--result", '{"ok": 1}')
    code, out, err = cli(stack, "callbacks", "complete", "--job", quiet, *answer)
    assert code == 0, err
    assert (
        out.strip() == f"callback approve of job {quiet}: the callback succeeded, the job is woken"
    )
    assert log_lines(err) == [], err
    for args in (("jobs", "list"), ("jobs", "show", quiet), ("dlq", "list")):
        code, _, err = cli(stack, *args)
        assert code == 0 and log_lines(err) == [], (args, err)

    for flag, job_id in (("-v", short), ("--verbose", long)):
        code, out, err = cli(stack, flag, "callbacks", "complete", "--job", job_id, *answer)
        assert code == 0, err
        assert (
            out.strip()
            == f"callback approve of job {job_id}: the callback succeeded, the job is woken"
        )
        said = [(d["msg"], d.get("job_id")) for d in log_lines(err)]
        assert ("callback answered", job_id) in said, err


def ran_twice_and_waits(stack: Stack, sql: Any) -> str:
    """A job that ran twice and waits on its second timer: it holds no lease, yet its row
    keeps the last worker's name (lease_owner), and no attempt is used (waits use none)."""
    job_id = submitted(stack, "demo.nap", "--payload", '{"seconds": 1, "naps": 2}')
    for runs in (1, 2):
        asyncio.run(handle_once(stack))  # the first message, then the first timer's
        row = job_row(sql, job_id)
        assert (row["state"], row["runs"]) == (JobState.WAITING, runs), row
    assert (row["attempt"], row["max_attempts"]) == (0, 5) and row["lease_owner"], row
    return job_id


def cells(out: str) -> list[list[str]]:
    """A table's rows as lists of their cells' text."""
    return [
        [c.strip() for c in re.split("[│┃]", line.strip("│┃"))]
        for line in out.splitlines()
        if line.startswith(("│", "┃"))
    ]


def test_a_job_that_ran_twice_and_waits_shows_its_runs_attempts_and_no_lease(
    stack: Stack, sql: Any
) -> None:
    job_id = ran_twice_and_waits(stack, sql)
    code, out, err = cli(stack, "jobs", "show", job_id)
    assert code == 0, err
    fields = {row[0]: row[1] for row in cells(out.split("timeline")[0]) if len(row) == 2}
    assert fields["runs"] == "2" and fields["attempts used"] == "0 of 5", fields
    assert fields["lease_owner"] == "", fields  # no lease: no owner, whatever the row keeps

    # The list says it too, and what the job waits for and until when (its timer's due
    # time); the time shown is the one the list is sorted by (newest created first).
    other = submitted(stack, "demo.noop", "--delay", "3600")
    code, out, err = cli(stack, "jobs", "list", "--state", "waiting")
    assert code == 0, err
    header, *rows = cells(out)
    listed = [dict(zip(header, row, strict=True)) for row in rows]
    assert [r["id"] for r in listed] == [other, job_id], out
    wake_at = job_row(sql, job_id)["wake_at"].astimezone(dt.UTC)
    assert listed[1]["runs"] == "2" and listed[1]["attempts used"] == "0/5", out
    assert listed[1]["waiting for"] == "timer nap-1", out
    assert listed[1]["until"] == f"{wake_at:%Y-%m-%d %H:%M:%S}", out
    assert listed[0]["waiting for"] == "timer run_at" and listed[0]["runs"] == "0", out
    assert "created" in header and "updated" not in header


def test_an_operator_sends_a_job_a_message_once_per_key_and_a_finished_job_refuses(
    stack: Stack, sql: Any
) -> None:
    job_id = submitted(stack, "demo.chat", "--payload", '{"messages": 1}')
    asyncio.run(handle_once(stack))
    assert job_row(sql, job_id)["state"] == JobState.WAITING
    bad = [
        start(stack, "jobs", "send", job_id, "user", "{nope"),
        start(stack, "jobs", "send", "not-an-id", "user", "1"),
    ]
    empty_key = start(stack, "jobs", "send", job_id, "user", "1", "--key", "")
    code, out, err = cli(stack, "jobs", "send", job_id, "user", '{"text": "hi"}', "--key", "k1")
    assert code == 0, err
    (message,) = sql.execute("SELECT id, body FROM job_messages").fetchall()
    assert message["body"] == {"text": "hi"}
    assert (
        out.strip()
        == f"message {message['id']} to job {job_id} on 'user': stored, the job is woken"
    )
    code, out, err = cli(stack, "jobs", "send", job_id, "user", '{"text": "hi"}', "--key", "k1")
    assert code == 0 and "sent before with this key, not stored again" in out, err
    assert job_row(sql, job_id)["state"] == JobState.QUEUED

    asyncio.run(handle_once(stack))
    assert job_row(sql, job_id)["state"] == JobState.SUCCEEDED
    code, out, err = cli(stack, "jobs", "show", job_id)
    assert code == 0, err
    shown = out[out.index("messages") :]
    assert '{"text": "hi"}' in shown and "unread" not in shown, shown
    code, out, err = cli(stack, "jobs", "send", job_id, "user", '"late"')
    assert code == 1 and f"job {job_id} is succeeded: it takes no messages" in err, err
    for proc, says in zip(
        bad, ["BODY is not valid JSON", "not a job id: 'not-an-id'"], strict=True
    ):
        code, _, err = finish(proc)
        assert code == 2 and says in err, (says, err)
    code, _, err = finish(empty_key)
    assert code == 1 and "Idempotency-Key must be 1 to 200 characters" in err, err
    assert [r["n"] for r in sql.execute("SELECT count(*) AS n FROM job_messages")] == [1]
