"""A fork killed right after its insert committed (crash point after_fork_inserted: the new
job and the effects it inherited are committed, its message is not sent): the outbox relay
sends it, it runs exactly once, and the steps it inherited are not run again (the fake
model server is not asked again; the webhook gets the fork's post once). Also the CLI's
re-run and `jobs show` of both ends of the links. On every carrier the run is given."""

from __future__ import annotations

import json
import uuid
from typing import Any

import pytest

from app.crashpoints import Point
from app.states import JobState
from tests.conftest import Stack, job_row
from tests.e2e.test_auth_cli import cli
from tests.e2e.test_crash_points import TICKET, died_by_sigkill, submit, webhook_starting
from tests.helpers import crash_env
from tests.invariants import (
    check_invariants,
    deliveries,
    describe,
    effects,
    model_outcomes,
    wait_for_state,
)

pytestmark = pytest.mark.e2e


@pytest.mark.asyncio
async def test_a_fork_killed_after_its_insert_runs_once_without_its_inherited_steps(
    stack: Stack, sql: Any
) -> None:
    # Given a triage job that ran: the model answered once, the webhook got its post once.
    webhook_up = webhook_starting(stack)
    stack.worker(name="worker")
    webhook_up()
    original = await submit(stack, "support.triage", TICKET)
    wait_for_state(sql, original, JobState.SUCCEEDED, timeout=90)
    assert model_outcomes(stack, f"{original}:triage") == ["ok"]

    # When `tasklease jobs fork --step post` dies once the fork is committed, unsent.
    proc = stack.spawn(
        "jobs", "fork", original, "--step", "post",
        env=crash_env(Point.AFTER_FORK_INSERTED), name="fork",
    )  # fmt: skip
    died_by_sigkill(proc, "`tasklease jobs fork` armed at after_fork_inserted")
    rows = sql.execute(
        "SELECT j.id, j.state, j.fork_step, o.sent_at FROM jobs j "
        "JOIN outbox o ON o.job_id = j.id WHERE j.forked_from = %s",
        (original,),
    ).fetchall()
    assert len(rows) == 1, rows
    fork = str(rows[0]["id"])
    assert (rows[0]["state"], rows[0]["fork_step"]) == (JobState.QUEUED, "post")
    assert rows[0]["sent_at"] is None, "the message was sent before the crash point"
    # Its inherited step is committed with it, a copy marked with its origin.
    assert [(f["key"], f["inherited_from"]) for f in effects(sql, fork)] == [
        ("triage", uuid.UUID(original))
    ]

    # Then the sweeper relays it, and the worker runs it once, from its step.
    sweep = stack.spawn("sweep", "--once", name="sweep")
    assert sweep.wait(60) == 0, sweep.log_path.read_text()  # type: ignore[attr-defined]
    row = wait_for_state(sql, fork, JobState.SUCCEEDED, timeout=90)
    assert row["attempt"] == 1, describe(sql, fork)
    assert row["result"]["delivered"] is True
    assert [(f["key"], f["inherited_from"]) for f in effects(sql, fork)] == [
        ("triage", uuid.UUID(original)),
        ("post", None),
    ]
    sent = sql.execute("SELECT sent_at FROM outbox WHERE job_id = %s", (fork,)).fetchall()
    assert [r["sent_at"] is not None for r in sent] == [True]
    # The model was not asked again: neither for the fork nor as the original.
    assert model_outcomes(stack, f"{fork}:triage") == []
    assert model_outcomes(stack, f"{original}:triage") == ["ok"]
    assert deliveries(stack) == {f"{original}:post": 1, f"{fork}:post": 1}
    check_invariants(sql, stack, [original, fork])

    # And `jobs show` names both ends of the link, and the inherited step's origin.
    code, out, err = cli(stack, "jobs", "show", fork)
    assert code == 0, err
    assert f"forked from {original} at step 'post'" in out
    code, out, err = cli(stack, "jobs", "show", original)
    assert code == 0, err
    assert "re-runs and forks of this job" in out and fork in out


@pytest.mark.carrier_neutral
def test_the_cli_reruns_a_dead_letter_with_an_edited_payload(stack: Stack, sql: Any) -> None:
    code, out, err = cli(stack, "submit", "support.triage", "--payload", json.dumps(TICKET))
    assert code == 0, err
    original = out.strip()
    sql.execute(
        "UPDATE jobs SET state = 'dead_lettered', dead_lettered_by = 'engine', "
        "finished_at = now(), last_error = 'given' WHERE id = %s",
        (original,),
    )
    edited = {**TICKET, "subject": "Edited"}

    code, out, err = cli(
        stack, "jobs", "rerun", original, "--payload", json.dumps(edited), "--json"
    )

    assert code == 0, err
    new = json.loads(out)
    assert new["rerun_of"] == original and new["payload"] == edited
    assert job_row(sql, new["id"])["state"] == JobState.QUEUED
    # Bad input: a clear error, nothing written.
    jobs_before = sql.execute("SELECT count(*) AS n FROM jobs").fetchone()["n"]
    code, out, err = cli(stack, "jobs", "rerun", original, "--payload", '{"ticket_id": 1}')
    assert code != 0 and "subject" in err, (out, err)
    code, out, err = cli(stack, "jobs", "fork", original, "--step", "nope")
    assert code != 0 and "no step 'nope'" in err, (out, err)
    assert sql.execute("SELECT count(*) AS n FROM jobs").fetchone()["n"] == jobs_before
