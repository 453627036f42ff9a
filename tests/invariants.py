"""The invariants (docs/explain/design.md#invariants), checked from what the system left behind.

The database (jobs, job_events, effects, outbox), the fake model's own call log
(one JSON line per call, shared by every process) and the webhook receiver's
/deliveries are the witnesses; nothing here trusts a process's word. Every e2e
test that kills something ends with ``check_invariants``; a test that dead-letters
a job ends with ``redrive_and_check`` (invariant 4).

1. A job accepted with 202 is never lost: it ends succeeded, dead_lettered or
   cancelled, or (``settled=False``) is still visibly on its way; a ``waiting`` job is
   on its way (it says what for and holds no lease), unless what it waits for has come
   (its callback answered, its gather decided): then nothing would ever wake it.
2. No effect recorded twice; no job completed twice; the model asked once per
   triage; the webhook delivered once per idempotency key. The one documented
   window (docs/explain/design.md#effects, point 4: the outside call returned, the process died
   before the insert) allows a second outside call when ``allow_effect_window``.
3. A zombie's late write changes nothing: every effect was written by the holder
   of the claim in force at that moment, nothing is written after the job ended,
   and the timeline is one unbroken chain of transitions.
4. A dead-lettered job can be redriven and then succeeds (``redrive_and_check``).
5. Nothing is half-written: a job row has its kind, payload and request hash, an
   outbox row and an 'accepted' event.
6. Messages to a job are read once each and in order: on each topic, the messages read
   are the oldest ones (none unread before a read one), each by its own receive, the
   receives numbered in the order of the messages.
7. No job is past its run's deadline unfinished once drained (``settled``).
"""

from __future__ import annotations

import collections
import datetime as dt
import subprocess
import uuid
from collections.abc import Iterable
from typing import Any

import httpx
import pytest

from app.states import FINAL_FOR_NOW, JobState
from app.tools.chaos import checker
from app.tools.chaos.per_message import message_violations
from tests.conftest import Stack, job_row, wait_for
from tests.retention_data import counts_by_scan, counts_maintained

FINAL = FINAL_FOR_NOW  # where a settled job is; the state-machine test drains to it
# A drained job past its deadline by more than this is a violation (invariant 7).
DEADLINE_GRACE_SECONDS = 1.0

# --- the witnesses ----------------------------------------------------------------


def timeline(sql: Any, job_id: Any) -> list[dict[str, Any]]:
    return sql.execute(  # type: ignore[no-any-return]
        "SELECT id, at, from_state, to_state, attempt, worker, detail FROM job_events "
        "WHERE job_id = %s ORDER BY id",
        (job_id,),
    ).fetchall()


def chunks(sql: Any, job_id: Any) -> list[dict[str, Any]]:
    """A job's streamed answers' chunks (seq, text), in seq order."""
    return sql.execute(  # type: ignore[no-any-return]
        "SELECT seq, data->>'text' AS text FROM job_output "
        "WHERE job_id = %s AND type = 'chunk' ORDER BY key, seq",
        (job_id,),
    ).fetchall()


def effects(sql: Any, job_id: Any) -> list[dict[str, Any]]:
    return sql.execute(  # type: ignore[no-any-return]
        "SELECT key, seq, attempt, worker, recorded_at, inherited_from, result FROM effects "
        "WHERE job_id = %s ORDER BY seq, recorded_at",
        (job_id,),
    ).fetchall()


def model_outcomes(stack: Stack, key: str) -> list[str]:
    """The fake model's outcomes for one idempotency key, in call order."""
    return [c["outcome"] for c in stack.model_calls() if c["key"] == key]


def webhook_base(stack: Stack) -> str | None:
    url = stack.env.get("TASKLEASE_WEBHOOK_URL")
    return url.removesuffix("/hook") if url else None


def deliveries(stack: Stack) -> dict[str, int]:
    """Deliveries per Idempotency-Key, or {} when the test started no webhook receiver."""
    base = webhook_base(stack)
    if base is None:
        return {}
    doc = httpx.get(f"{base}/deliveries", timeout=10).json()
    return {str(k): int(v) for k, v in doc["by_key"].items()}


def describe(sql: Any, job_id: Any) -> str:
    """A job's row and timeline, for an assertion message a reader can act on."""
    row = sql.execute("SELECT * FROM jobs WHERE id = %s", (job_id,)).fetchone()
    if row is None:
        return f"job {job_id}: no row"
    lines = [
        f"job {job_id} kind={row['kind']} state={row['state']} attempt={row['attempt']}"
        f"/{row['max_attempts']} redrives={row['redrives']} lease_owner={row['lease_owner']} "
        f"last_error={row['last_error']!r}"
    ]
    for e in timeline(sql, job_id):
        lines.append(
            f"  #{e['id']} {e['at']:%H:%M:%S.%f} {e['from_state'] or '-'} -> {e['to_state']} "
            f"attempt={e['attempt']} worker={e['worker']} {e['detail'] or ''}"
        )
    for f in effects(sql, job_id):
        lines.append(
            f"  effect {f['key']} seq={f['seq']} attempt={f['attempt']} worker={f['worker']} "
            f"at {f['recorded_at']:%H:%M:%S.%f}"
        )
    return "\n".join(lines)


def wait_for_state(
    sql: Any, job_id: Any, state: JobState, *, timeout: float = 60, what: str | None = None
) -> dict[str, Any]:
    """wait_for the job to reach ``state``; on a timeout the failure shows its timeline."""

    def reached() -> dict[str, Any] | None:
        row = job_row(sql, job_id)
        return row if row["state"] == state else None

    try:
        return wait_for(reached, timeout=timeout, what=what or f"job {job_id} to be {state}")  # type: ignore[no-any-return]
    except pytest.fail.Exception as exc:
        pytest.fail(f"{exc}\n{describe(sql, job_id)}", pytrace=False)


# --- the checks -------------------------------------------------------------------


def check_invariants(
    sql: Any,
    stack: Stack,
    job_ids: Iterable[Any] | None = None,
    *,
    allow_effect_window: bool = False,
    settled: bool = True,
) -> None:
    """Assert invariants 1, 2, 3, 5 and 6 for these jobs (None: every job in the database).

    ``settled``: the test has drained, so every job must be in a final state; with
    False a job still queued/leased/running/retrying/stalled is on its way and passes.
    ``allow_effect_window``: a process was killed between an outside call and its
    insert (the inside_effect crash point): a second outside call for that effect is
    the documented window, still recorded once.
    """
    ids = (
        [uuid.UUID(str(j)) for j in job_ids]
        if job_ids is not None
        else [r["id"] for r in sql.execute("SELECT id FROM jobs ORDER BY created_at").fetchall()]
    )
    assert ids, "check_invariants was given no jobs to check"
    calls = stack.model_calls()
    outside = checker.Outside(
        ok_calls=collections.Counter(c["key"] for c in calls if c["outcome"] == "ok"),
        delivered=deliveries(stack),
        limit=2 if allow_effect_window else 1,
        webhook=webhook_base(stack) is not None,
    )
    problems: dict[uuid.UUID | None, list[str]] = collections.defaultdict(list)
    for job_id in ids:
        row = sql.execute("SELECT * FROM jobs WHERE id = %s", (job_id,)).fetchone()
        outbox = sql.execute(
            "SELECT count(*) AS n FROM outbox WHERE job_id = %s", (job_id,)
        ).fetchone()["n"]
        found = checker.job_violations(
            job_id,
            row,
            timeline(sql, job_id),
            effects(sql, job_id),
            outbox,
            outside,
            settled=settled,
        )
        found = _with_deadline(row, found, settled=settled)
        problems[job_id] += _with_waits(sql, row, found, settled=settled)
        problems[job_id] += messages_violations(sql, job_id)
    for key, what in checker.delivery_violations(outside):
        problems[_job_of(key)].append(what)
    if counts_maintained(sql) != counts_by_scan(sql):
        problems[None].append(
            f"the maintained counts by state {counts_maintained(sql)} are not the table's "
            f"{counts_by_scan(sql)}"
        )

    bad = {j: p for j, p in problems.items() if p}
    if bad:
        report = []
        for job_id, found in bad.items():
            report.append("\n".join(f"- {p}" for p in found))
            if job_id is not None:
                report.append(describe(sql, job_id))
        pytest.fail("invariants violated:\n" + "\n".join(report), pytrace=False)


def _with_deadline(row: dict[str, Any] | None, found: list[str], *, settled: bool) -> list[str]:
    """Invariant 7: once drained, no job is past its run's deadline unfinished (with a
    grace for the statement's own clock). A job its deadline ended is dead-lettered by
    'deadline' with the reason "deadline passed"."""
    if row is None:
        return found
    deadline = row.get("deadline")
    late = dt.datetime.now(dt.UTC) - dt.timedelta(seconds=DEADLINE_GRACE_SECONDS)
    if settled and deadline is not None and row["state"] not in FINAL and deadline < late:
        found.append(f"7: {row['state']} past its deadline {deadline.isoformat()}")
    return found


def _with_waits(
    sql: Any, row: dict[str, Any] | None, found: list[str], *, settled: bool
) -> list[str]:
    """Invariant 1 with waits: a waiting job is on its way (the checker's own list of
    states on their way may not know it) unless its condition is met."""
    if row is None or row["state"] != JobState.WAITING:
        return found
    if not settled:
        found = [f for f in found if not f.startswith("1: state waiting")]
    if row["wait_kind"] is None:
        found.append("1: waiting, but for nothing: nothing would ever wake it")
    if row["lease_token"] is not None:
        found.append("1: waiting but still holds a lease token")
    met = sql.execute("SELECT wait_answered(j) AS met FROM jobs j WHERE id = %s", (row["id"],))
    if met.fetchone()["met"]:
        found.append(
            f"1: still waiting for {row['wait_kind']} {row['wait_key']!r} whose condition is met"
        )
    return found


def messages_violations(sql: Any, job_id: Any) -> list[str]:
    """Invariant 6, from job_messages alone (the chaos checker's, per_message.py)."""
    rows = sql.execute(
        "SELECT id, topic, consumed_by FROM job_messages WHERE job_id = %s ORDER BY id", (job_id,)
    ).fetchall()
    return message_violations(rows)


def _job_of(key: str) -> uuid.UUID | None:
    try:
        return uuid.UUID(key.split(":", 1)[0])
    except ValueError:
        return None


# --- invariant 4 ------------------------------------------------------------------


def _worker_running(stack: Stack) -> bool:
    return any(
        p.poll() is None and len(p.args) > 3 and p.args[3] == "worker"  # type: ignore[index, arg-type]
        for p in stack.procs
    )


def redrive_and_check(
    stack: Stack, sql: Any, job_id: Any, *, timeout: float = 60
) -> dict[str, Any]:
    """Invariant 4: ``tasklease redrive --job ID`` exits 0 and the job then succeeds.

    Starts a worker when none is running.
    """
    assert job_row(sql, job_id)["state"] == JobState.DEAD_LETTERED, describe(sql, job_id)
    proc = stack.spawn("redrive", "--job", str(job_id), name="redrive")
    try:
        code = proc.wait(timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        pytest.fail(f"`tasklease redrive --job {job_id}` did not exit in {timeout:.0f} s")
    output = proc.log_path.read_text()
    assert code == 0, f"`tasklease redrive --job {job_id}` exited {code}:\n{output[-3000:]}"
    if not _worker_running(stack):
        stack.worker(name="after-redrive")

    row = wait_for_state(
        sql, job_id, JobState.SUCCEEDED, timeout=timeout, what="the redriven job to succeed"
    )
    events = timeline(sql, job_id)
    last_dead = max(i for i, e in enumerate(events) if e["to_state"] == JobState.DEAD_LETTERED)
    assert any(e["to_state"] == JobState.SUCCEEDED for e in events[last_dead:]), describe(
        sql, job_id
    )
    return row
