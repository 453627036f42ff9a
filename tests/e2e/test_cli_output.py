"""What the CLI prints, as an operator and a shell see it: `tasklease` run as a process
against the test's database and queues (moto's SQS server over HTTP), with stdout a pipe
and COLUMNS set as a terminal of that width would set it.

Tables show every value a tenant, a worker or an operator wrote as written (never as rich
markup), job ids whole at any width, and output meant for a shell or a program (export
lines, ids, keys) plain: one line each, never wrapped, never styled."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import uuid
from typing import Any

import pytest

from tests.conftest import ROOT, Stack, wait_for

# What this module checks does not depend on the carrier: it runs on moto only.
pytestmark = [pytest.mark.e2e, pytest.mark.carrier_neutral]

# A subject a tenant may send: `[/]` closes no tag (rich raises MarkupError), `[red]` would
# vanish into a colour.
SUBJECT = "refund [/] please [red]now"
# The fake model refuses a ticket tagged so; its error, "... [permanent] tag", must show.
PERMANENT = f"[permanent] {SUBJECT}"
MARKUP = "boom [/] [red]not a colour[/red] [bold]"
UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")


def cli(stack: Stack, *args: str, columns: int = 200) -> tuple[int, str, str]:
    """(exit code, stdout, stderr) of one `tasklease` command, stdout and stderr pipes."""
    proc = subprocess.run(
        [sys.executable, "-m", "app.cli", *args],
        env={**stack.env, "COLUMNS": str(columns)},
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    return proc.returncode, proc.stdout, proc.stderr


def ok(stack: Stack, *args: str, columns: int = 200) -> str:
    code, out, err = cli(stack, *args, columns=columns)
    assert code == 0, (args, err)
    assert "Traceback" not in err, (args, err)
    return out


def flat(text: str) -> str:
    """The output as one line of words, and each table column's cells read top to bottom:
    rich wraps a long cell over several lines of its column."""
    columns: dict[int, list[str]] = {}
    for line in text.splitlines():
        if line[:1] in ("│", "┃"):
            for i, part in enumerate(line.replace("┃", "│").split("│")[1:-1]):
                columns.setdefault(i, []).append(part.strip())
    pieces = [text, *(" ".join(c) for c in columns.values())]
    return " | ".join(" ".join(piece.split()) for piece in pieces)


def submit_ticket(stack: Stack, subject: str, ticket_id: str = "T-[b]1") -> uuid.UUID:
    payload = {"ticket_id": ticket_id, "subject": subject, "body": "charged twice [i]"}
    out = ok(stack, "submit", "support.triage", "--payload", json.dumps(payload))
    return uuid.UUID(out.strip())


def settled(sql: Any, *ids: uuid.UUID) -> bool:
    rows = sql.execute(
        "SELECT state FROM jobs WHERE id = ANY(%s)", ([str(i) for i in ids],)
    ).fetchall()
    return all(r["state"] in ("succeeded", "dead_lettered") for r in rows)


def dead_letter(sql: Any, job_id: uuid.UUID, error: str) -> None:
    """The job as the engine leaves it after its last attempt failed."""
    sql.execute(
        "UPDATE jobs SET state = 'dead_lettered', attempt = max_attempts, last_error = %s,"
        " dead_lettered_by = 'engine', finished_at = now() WHERE id = %s",
        (error, job_id),
    )


def test_text_a_tenant_controls_is_shown_as_written_in_every_table(stack: Stack, sql: Any) -> None:
    """Issue 13 item 4: a job whose subject is `refund [/] please [red]now` made
    `tasklease jobs show` exit 1 with rich's MarkupError, and `[permanent]` vanished from
    `last_error` in `jobs list` and `jobs show`. Every table prints what tenants, workers
    and operators wrote as text, whole words, at 80 columns as on a wide terminal."""
    answered = submit_ticket(stack, SUBJECT)
    refused = submit_ticket(stack, PERMANENT)
    stack.worker()
    wait_for(lambda: settled(sql, answered, refused), what="both tickets settled")
    code, _, err = cli(stack, "keys", "create", "--tenant", "acme", "--name", MARKUP)
    assert code == 0, err
    assert MARKUP in flat(err)

    for columns in (80, 200):
        # The answer quotes the subject: jobs show prints it in the result.
        shown = flat(ok(stack, "jobs", "show", str(answered), columns=columns))
        assert SUBJECT in shown, columns
        assert "T-[b]1" in shown, columns
        shown = flat(ok(stack, "jobs", "show", str(refused), columns=columns))
        assert "(fake: [permanent] tag)" in shown, columns
        for args in (("jobs", "list"), ("dlq", "list"), ("redrive", "--dry-run")):
            assert "(fake: [permanent] tag)" in flat(ok(stack, *args, columns=columns)), args
        assert MARKUP in flat(ok(stack, "keys", "list", columns=columns)), columns

    # An operator's error text in a redrive report, and a limits table: still text.
    dead_letter(sql, answered, MARKUP)
    out = flat(ok(stack, "redrive", "--job", str(answered)))
    assert MARKUP in out
    assert "sent anew (no dead letter found)" in out
    assert "7" in ok(stack, "limits", "set", "acme", "--burst", "7")
    assert "10000 (default)" in ok(stack, "limits", "list")


def test_job_ids_are_never_cut_at_any_terminal_width(stack: Stack, sql: Any) -> None:
    """Issue 13 item 5: `jobs list` cut job ids (`59aaec6c…` at 80 columns,
    `118612c2-c2aa-4f2f-…` at 120), and operators paste them into `--job`. Every list of
    jobs shows each id whole; the other columns wrap instead."""
    ids = set()
    for i in range(3):
        out = ok(stack, "submit", "demo.noop", "--tenant", f"tenant-with-a-long-name-{i}")
        ids.add(out.strip())
    for job_id in sorted(ids)[:2]:
        dead_letter(sql, uuid.UUID(job_id), "permanent: " + "a long error " * 10)
    dead = set(sorted(ids)[:2])

    for columns in (40, 60, 80, 120):
        listed = ok(stack, "jobs", "list", columns=columns)
        assert set(UUID.findall(listed)) == ids, (columns, listed)
        # Words are not cut either: the tenant and the error show whole (if wrapped).
        assert "tenant-with-a-long-name-0" in listed, columns
        assert "permanent: a long error" in flat(listed), columns
        for args in (("dlq", "list"), ("redrive", "--dry-run")):
            out = ok(stack, *args, columns=columns)
            assert set(UUID.findall(out)) == dead, (columns, args, out)


def bash(script: str, env: dict[str, str]) -> str:
    proc = subprocess.run(
        ["bash", "-c", script], env=env, cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


@pytest.mark.parametrize("columns", [None, "40"])
def test_queues_create_output_evals_in_bash_with_long_queue_names(
    stack: Stack, columns: str | None
) -> None:
    """Issue 13 item 18: `eval "$(uv run tasklease queues create)"` (the README's recipe)
    broke when stdout was not a terminal: rich wrapped the lines at 80 columns and split a
    long queue URL across two lines. Output for a shell is plain lines, never wrapped."""
    # 71 characters: the longest name whose "-high-dlq" queue fits SQS's 80.
    name = f"a-queue-with-a-long-name-for-the-eval-recipe-{uuid.uuid4().hex}"[:71]
    env = {k: v for k, v in stack.env.items() if k != "COLUMNS"}
    if columns:
        env["COLUMNS"] = columns
    names = (
        "QUEUE_URL",
        "DLQ_URL",
        "QUEUE_URL_HIGH",
        "DLQ_URL_HIGH",
        "QUEUE_URL_LOW",
        "DLQ_URL_LOW",
    )
    script = f'eval "$({sys.executable} -m app.cli queues create --name {name})"\n' + "".join(
        f'printf "%s\\n" "$TASKLEASE_{n}"\n' for n in names
    )
    # Without the stack's own URLs: what is printed can only come from the command.
    mine = ("TASKLEASE_QUEUE_URL", "TASKLEASE_DLQ_URL")
    urls = bash(script, {k: v for k, v in env.items() if not k.startswith(mine)}).splitlines()
    queues = [
        name,
        f"{name}-dlq",
        f"{name}-high",
        f"{name}-high-dlq",
        f"{name}-low",
        f"{name}-low-dlq",
    ]
    # On SQS, each queue's URL; on Redis, the stream's name is its "URL".
    expected = stack.carrier(lambda t: t.create_queues(name))  # made already: found
    assert urls == [
        expected.queue_url,
        expected.dlq_url,
        expected.queue_url_high,
        expected.dlq_url_high,
        expected.queue_url_low,
        expected.dlq_url_low,
    ]
    assert [u.rsplit("/", 1)[-1] for u in urls] == queues
    assert max(len(u) for u in urls) >= 80  # longer than a terminal's line


def test_ids_and_keys_for_a_program_are_one_plain_line_at_any_width(stack: Stack) -> None:
    """Issue 13 item 18: what a program captures (`$(tasklease submit ...)`,
    `$(tasklease keys create ...)`) is one line, never wrapped, with no escape codes, even
    on a terminal narrower than it (FORCE_COLOR as a CI runner may set it)."""
    env = {**stack.env, "COLUMNS": "20", "FORCE_COLOR": "1"}
    out = bash(f"{sys.executable} -m app.cli submit demo.noop", env)
    assert UUID.fullmatch(out.rstrip("\n")), repr(out)
    out = bash(f"{sys.executable} -m app.cli keys create --tenant acme 2>/dev/null", env)
    assert re.fullmatch(r"tlk_[0-9a-f]{12}_[A-Za-z0-9_-]{43}\n", out), repr(out)


@pytest.mark.sqs_only  # SQS's 80-character queue-name quota (a stream's key has none)
def test_a_queue_name_too_long_for_its_priority_queues_is_refused(stack: Stack) -> None:
    name = "q" * 72  # "-high-dlq" would make an 81-character queue name
    proc = subprocess.run(
        [sys.executable, "-m", "app.cli", "queues", "create", "--name", name],
        env=stack.env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode != 0 and proc.stdout == ""
    assert "too long" in proc.stderr and "at most 71" in proc.stderr, proc.stderr
    assert not stack.sqs.list_queues(QueueNamePrefix=name).get("QueueUrls")
