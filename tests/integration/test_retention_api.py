"""Retention seen from outside (docs/explain/design.md#retention): a replay of a pruned job's
Idempotency-Key makes a new job; the sweeper prunes in its pass, says so in its report
and counts it in the metrics."""

from __future__ import annotations

from typing import Any

import pytest

from app import metrics
from tests.conftest import Stack
from tests.e2e.test_wait_crash_points import sweep_once
from tests.retention_data import old_job, rows_of

pytestmark = [pytest.mark.integration, pytest.mark.carrier_neutral]

BODY = {"kind": "demo.noop", "payload": {}}


def finished_long_ago(sql: Any, job_id: str) -> None:
    sql.execute(
        "UPDATE jobs SET state = 'succeeded', created_at = now() - interval '40 days', "
        "finished_at = now() - interval '40 days' WHERE id = %s",
        (job_id,),
    )


def test_a_replay_answers_the_job_until_it_is_pruned_then_makes_a_new_one(
    api: Any, stack: Stack, sql: Any
) -> None:
    first = api.post("/v1/jobs", json=BODY, headers={"Idempotency-Key": "order-7"})
    assert first.status_code == 202, first.text
    job_id = first.json()["id"]
    finished_long_ago(sql, job_id)

    replay = api.post("/v1/jobs", json=BODY, headers={"Idempotency-Key": "order-7"})
    assert replay.json()["id"] == job_id  # kept: the replay answers the job it made

    sweep_once(stack)  # past the replay window and the retention: pruned
    assert rows_of(sql, [job_id])["jobs"] == 0
    fresh = api.post("/v1/jobs", json=BODY, headers={"Idempotency-Key": "order-7"})
    assert fresh.status_code == 202, fresh.text
    assert fresh.json()["id"] != job_id


def test_the_sweeper_prunes_in_its_pass_and_reports_it(stack: Stack, sql: Any) -> None:
    ids = [old_job(sql, "cancelled", 31) for _ in range(3)]
    sweep = stack.spawn("sweep", "--once", name="sweep")
    assert sweep.wait(60) == 0, sweep.log_path.read_text()
    assert "pruned=3" in sweep.log_path.read_text()
    assert rows_of(sql, ids)["jobs"] == 0


@pytest.mark.asyncio
async def test_the_prune_counts_rows_by_table_and_state_in_the_metrics(
    stack: Stack, sql: Any
) -> None:
    from app import store
    from app.services import retention

    def pruned(table: str) -> float:
        value = metrics.REGISTRY.get_sample_value(
            "tasklease_pruned_rows_total", {"table": table, "state": "succeeded"}
        )
        return value or 0.0

    before = {t: pruned(t) for t in ("jobs", "job_events")}
    old_job(sql, "succeeded", 45)
    async with store.connect(str(stack.settings.database_url)) as db:
        await retention.prune(stack.settings, db)
    assert pruned("jobs") - before["jobs"] == 1
    assert pruned("job_events") - before["job_events"] == 2
