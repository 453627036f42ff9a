"""Issue 13 item 1: a per-job redrive budget.

A tool that drains the DLQ until it is empty (receive, send to the source queue copying
the attributes, delete) used to re-run a permanently failing job once per round: each
redrive restarted the attempt budget. Real PostgreSQL, a real SQS server over HTTP, the
engine in this process, the drain tool in plain boto3.
"""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from app import errors, store
from app.api import create_app
from app.services import redrive
from app.states import JobState
from tests import carrier
from tests.conftest import Stack, bearer, job_row
from tests.e2e.test_auth_cli import cli
from tests.helpers import dlq_messages, engine_for, receive_records, submit
from tests.integration.conftest import TestClient

pytestmark = pytest.mark.integration

BUDGET = 2
# Fails at every model call, so at every run: one model call per run of the kind's code.
PERMANENT_TICKET = {"ticket_id": "T-13", "subject": "[permanent] refund", "body": "please"}
# Rounds of the drain tool: far more than the budget.
DRAIN_ROUNDS = 8


def events(sql: Any, job_id: uuid.UUID) -> list[dict[str, Any]]:
    return list(
        sql.execute("SELECT * FROM job_events WHERE job_id = %s ORDER BY id", (job_id,)).fetchall()
    )


async def run_source_queue(stack: Stack, engine: Any) -> None:
    """The worker, as Lambda's event source mapping runs it: handle what the source queue
    holds and delete the successes, until a receive finds nothing."""
    for _ in range(5):
        records = await receive_records(engine, wait=1)
        if not records:
            return
        failed = {
            f["itemIdentifier"]
            for f in (await engine.handle({"Records": records}, None))["batchItemFailures"]
        }
        for r in records:
            if r["messageId"] not in failed:
                carrier.delete_raw(stack, r["receiptHandle"])


def drain_tool_round(stack: Stack) -> int:
    """One round of a third-party "move the DLQ back" tool: every message it receives is
    sent to the source queue with its body and attributes, then deleted. How many moved."""
    moved = 0
    for m in dlq_messages(stack, visibility=5):
        carrier.send_raw(stack, m["Body"], m.get("MessageAttributes", {}))
        carrier.delete_raw(stack, m["ReceiptHandle"], url=stack.settings.dlq)
        moved += 1
    return moved


async def dead_letter_permanent(stack: Stack, engine: Any, sql: Any) -> uuid.UUID:
    job_id: uuid.UUID = await submit(engine, "support.triage", PERMANENT_TICKET, max_attempts=3)
    await run_source_queue(stack, engine)
    row = job_row(sql, job_id)
    assert row["state"] == JobState.DEAD_LETTERED, row
    return job_id


@pytest.mark.asyncio
async def test_a_tool_draining_the_dlq_runs_a_permanently_failing_job_only_within_the_redrive_budget(
    stack: Stack, sql: Any
) -> None:
    """Issue 13 item 1: receive/send/delete copying the attributes, until the DLQ is
    empty, re-ran a permanently failing job once per round; it now runs 1 + budget times,
    then the redriven message is deleted unrun and the job stays dead-lettered, saying why."""
    settings = stack.with_settings(redrive_budget=BUDGET)
    async with engine_for(settings) as engine:
        job_id = await dead_letter_permanent(stack, engine, sql)
        rounds = 0
        for _ in range(DRAIN_ROUNDS):
            if not drain_tool_round(stack):
                break  # the DLQ is empty: the tool is done
            rounds += 1
            await run_source_queue(stack, engine)
        # The refused message was its last dead letter: the sweeper counts none for it.
        accounted = await store.sweeper_marks.dlq_accounted(
            engine.db, depth=0, retention=settings.dlq_retention_seconds
        )

    assert accounted == 0
    runs = len(stack.model_calls())
    assert runs == 1 + BUDGET, f"the job's code ran {runs} times"
    assert rounds == BUDGET + 1  # the last moved message was refused, and nothing came back
    row = job_row(sql, job_id)
    assert row["state"] == JobState.DEAD_LETTERED
    assert row["last_error"].startswith("redrive budget used up")
    assert "permanent" in row["last_error"]  # the failure itself is kept after the reason
    assert (row["redrives"], row["runs"], row["attempt"]) == (BUDGET, 1 + BUDGET, 1)
    refused = [e for e in events(sql, job_id) if (e["detail"] or "").startswith("redrive refused")]
    assert len(refused) == 1 and refused[0]["to_state"] == JobState.DEAD_LETTERED
    assert dlq_messages(stack, visibility=1) == []
    assert stack.queue_depth() == 0

    # The API shows it: redrives and runs beside attempt, the reason in last_error.
    with TestClient(create_app(settings)) as client:
        key = stack.key(row["tenant"])
        resp = client.get(f"/v1/jobs/{job_id}", headers=bearer(key))
        assert resp.status_code == 200, resp.text
        body = resp.json()
        assert (body["redrives"], body["runs"], body["attempt"]) == (BUDGET, 1 + BUDGET, 1)
        assert body["last_error"].startswith("redrive budget used up")
        timeline = client.get(f"/v1/jobs/{job_id}/events", headers=bearer(key)).json()
        assert any((e["detail"] or "").startswith("redrive refused") for e in timeline)


@pytest.mark.asyncio
async def test_the_api_and_the_operator_redrive_refuse_past_the_budget_and_force_still_redrives(
    stack: Stack, sql: Any
) -> None:
    """Issue 13 item 1: POST /v1/jobs/{id}/redrive and the operator's redrive honour the
    budget (409 / refused, nothing changed); an admin's force=true and --force redrive."""
    settings = stack.with_settings(redrive_budget=1)
    async with engine_for(settings) as engine:
        job_id = await dead_letter_permanent(stack, engine, sql)
        with TestClient(create_app(settings)) as client:
            owner = bearer(stack.key(job_row(sql, job_id)["tenant"]))
            tenant, admin = owner, bearer(stack.key("ops", admin=True))
            url = f"/v1/jobs/{job_id}/redrive"
            assert client.post(url, headers=tenant).status_code == 202  # within the budget
            await run_source_queue(stack, engine)
            before = job_row(sql, job_id)
            assert before["state"] == JobState.DEAD_LETTERED and before["runs"] == 2

            refused = client.post(url, headers=tenant)
            assert refused.status_code == 409, refused.text
            assert "redrive budget is used up" in refused.json()["detail"]
            assert str(job_id) in refused.json()["detail"]
            assert client.post(url, headers=admin).status_code == 409  # no force: refused too
            forbidden = client.post(url, params={"force": "true"}, headers=tenant)
            assert forbidden.status_code == 403, forbidden.text
            assert job_row(sql, job_id) == before  # nothing changed

            # The operator's redrive (what `tasklease redrive --job` runs): refused...
            report = await redrive.redrive(settings, engine.db, engine.queue, job_ids=[job_id])
            assert report.refused == [job_id] and report.reset == report.moved == 0
            assert job_row(sql, job_id)["state"] == JobState.DEAD_LETTERED
            # The walk leaves the dead letters it did not move visible, not hidden for 30 s.
            hidden = carrier.depth(stack, settings.dlq)["ApproximateNumberOfMessagesNotVisible"]
            assert hidden == 0
            # ...and forced (`tasklease redrive --job ID --force`).
            report = await redrive.redrive(
                settings, engine.db, engine.queue, job_ids=[job_id], force=True
            )
            assert report.refused == [] and report.reset == 1
            await run_source_queue(stack, engine)
            assert job_row(sql, job_id)["runs"] == 3

            forced = client.post(url, params={"force": "true"}, headers=admin)
            assert forced.status_code == 202, forced.text
            assert forced.json()["redrives"] == 3 and forced.json()["state"] == "queued"
            await run_source_queue(stack, engine)

    row = job_row(sql, job_id)
    assert (row["state"], row["redrives"], row["runs"]) == (JobState.DEAD_LETTERED, 3, 4)
    assert len(stack.model_calls()) == 4
    forced_events = [e for e in events(sql, job_id) if "forced" in (e["detail"] or "")]
    assert len(forced_events) == 2


def test_a_bad_redrive_budget_stops_start_up_naming_the_variable(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Issue 13 item 1: the budget's settings are checked at start-up."""
    from app.settings import config

    for var, value in (
        ("TASKLEASE_REDRIVE_BUDGET", "-1"),
        ("TASKLEASE_REDRIVE_WINDOW_SECONDS", "0"),
    ):
        with monkeypatch.context() as m:
            m.setenv(var, value)
            with pytest.raises(errors.ConfigError, match=var):
                config.load()


@pytest.mark.asyncio
async def test_tasklease_redrive_refuses_a_job_past_its_budget_naming_it_and_force_redrives(
    stack: Stack, sql: Any
) -> None:
    """Issue 13 item 1: `tasklease redrive --job ID` past the budget exits 1 with a line
    naming the job and the budget, changing nothing; `--force` redrives; `jobs show`
    shows redrives and runs."""
    async with engine_for(stack.settings) as engine:
        job_id = await dead_letter_permanent(stack, engine, sql)
    stack.env["TASKLEASE_REDRIVE_BUDGET"] = "0"
    before = job_row(sql, job_id)

    code, out, err = cli(stack, "redrive", "--job", str(job_id))
    assert code == 1, (out, err)
    assert f"job {job_id}: redrive budget used up (0 redrives within 86400 s" in err
    assert f"tasklease redrive --job {job_id} --force" in err
    assert job_row(sql, job_id) == before
    depth = carrier.depth(stack, stack.settings.dlq)
    visible, hidden = (
        depth["ApproximateNumberOfMessages"],
        depth["ApproximateNumberOfMessagesNotVisible"],
    )
    assert visible + hidden == 1  # the dead letter stays in the DLQ

    code, out, err = cli(stack, "redrive", "--job", str(job_id), "--force")
    assert code == 0, (out, err)
    row = job_row(sql, job_id)
    assert (row["state"], row["redrives"], row["runs"]) == (JobState.QUEUED, 1, 1)

    code, out, err = cli(stack, "jobs", "show", str(job_id))
    assert code == 0, err
    shown = {
        line.split("│")[1].strip(): line.split("│")[2].strip()
        for line in out.splitlines()
        if line.count("│") == 3
    }
    assert (shown["redrives"], shown["runs"]) == ("1", "1"), out
