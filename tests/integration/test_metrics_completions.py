"""tasklease_jobs_completed_total counts every job's end once, whatever path made it
(issue 30 item 14: a job cancelled by the API while waiting, and one the sweeper
dead-lettered, were not counted): a worker's success and failures, the API's cancel of a
queued, waiting or dead-lettered job and of the children a cancelled parent takes with it,
the sweeper's dead-lettering and its cancelling of orphans, and a refused redrive (no new
end). Each path is driven for real (the API in this process, the engine in this process,
real PostgreSQL and the carrier) and read back from GET /metrics."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable
from typing import Any

import pytest

from app.services import redrive, sweeper
from app.transport import codec
from tests import carrier
from tests.conftest import Stack, job_row
from tests.helpers import engine_for, receive_records
from tests.integration.test_metrics import Figures, scrape

pytestmark = pytest.mark.integration

COMPLETED = "tasklease_jobs_completed_total"
DONE_COUNT = "tasklease_job_submit_to_done_seconds_count"
Ends = dict[tuple[str, str], int]  # (kind, outcome) -> how many ends


def post(api: Any, kind: str, payload: dict[str, Any], **extra: Any) -> str:
    resp = api.post("/v1/jobs", json={"kind": kind, "payload": payload, **extra})
    assert resp.status_code == 202, resp.text
    return str(resp.json()["id"])


def handle(stack: Stack, sql: Any, job_id: str, until: set[str], settings: Any = None) -> None:
    """Handle the carrier's messages in this process until the job is in one of ``until``."""

    async def go() -> None:
        async with engine_for(settings or stack.settings) as engine:
            for _ in range(20):
                records = await receive_records(engine, wait=1)
                if records:
                    await engine.handle({"Records": records}, None)
                if job_row(sql, job_id)["state"] in until:
                    return

    asyncio.run(go())
    assert job_row(sql, job_id)["state"] in until, job_row(sql, job_id)


def cancel(api: Any, job_id: str) -> None:
    resp = api.post(f"/v1/jobs/{job_id}/cancel")
    assert resp.status_code == 200, resp.text
    assert resp.json()["state"] == "cancelled", resp.json()


def waiting_parent(api: Any, stack: Stack, sql: Any) -> tuple[str, list[uuid.UUID]]:
    """A demo.fanout job waiting for its 3 children (demo.nap), which are queued."""
    parent = post(api, "demo.fanout", {"children": 3, "child_seconds": 60})
    handle(stack, sql, parent, {"waiting"})
    kids = [r["id"] for r in sql.execute("SELECT id FROM jobs WHERE parent_id = %s", (parent,))]
    assert len(kids) == 3 and all(job_row(sql, k)["state"] == "queued" for k in kids)
    return parent, kids


def worker_success(api: Any, stack: Stack, sql: Any) -> Ends:
    handle(stack, sql, post(api, "demo.noop", {}), {"succeeded"})
    return {("demo.noop", "succeeded"): 1}


def worker_permanent_failure(api: Any, stack: Stack, sql: Any) -> Ends:
    handle(stack, sql, post(api, "demo.flaky", {"permanent": True}), {"dead_lettered"})
    return {("demo.flaky", "dead_lettered"): 1}


def worker_attempts_used_up(api: Any, stack: Stack, sql: Any) -> Ends:
    job = post(api, "demo.flaky", {"fail_attempts": 5}, max_attempts=1)
    handle(stack, sql, job, {"dead_lettered"})
    return {("demo.flaky", "dead_lettered"): 1}


def api_cancel_queued(api: Any, stack: Stack, sql: Any) -> Ends:
    cancel(api, post(api, "demo.noop", {}))
    return {("demo.noop", "cancelled"): 1}


def api_cancel_waiting(api: Any, stack: Stack, sql: Any) -> Ends:
    job = post(api, "demo.approval", {"timeout_seconds": 600})
    handle(stack, sql, job, {"waiting"})
    cancel(api, job)
    return {("demo.approval", "cancelled"): 1}


def api_cancel_waiting_parent_and_its_children(api: Any, stack: Stack, sql: Any) -> Ends:
    parent, kids = waiting_parent(api, stack, sql)
    cancel(api, parent)
    assert all(job_row(sql, k)["state"] == "cancelled" for k in kids)  # by the trigger
    return {("demo.fanout", "cancelled"): 1, ("demo.nap", "cancelled"): 3}


def api_cancel_dead_letter(api: Any, stack: Stack, sql: Any) -> Ends:
    job = post(api, "demo.flaky", {"permanent": True})
    handle(stack, sql, job, {"dead_lettered"})
    cancel(api, job)
    return {("demo.flaky", "dead_lettered"): 1, ("demo.flaky", "cancelled"): 1}


def sweeper_dead_letters(api: Any, stack: Stack, sql: Any) -> Ends:
    job = post(api, "demo.noop", {})

    async def go() -> None:
        async with engine_for(stack.settings) as engine:
            assert await receive_records(engine)  # taken and never claimed: the carrier's
            carrier.send_raw(stack, codec.body_for(job), url=stack.settings.dlq)  # backstop
            report = await sweeper.sweep_once(stack.settings, engine.db, engine.queue)
            assert report.dead_lettered == 1

    asyncio.run(go())
    assert job_row(sql, job)["dead_lettered_by"] == "sweeper"
    return {("demo.noop", "dead_lettered"): 1}


def sweeper_cancels_orphans(api: Any, stack: Stack, sql: Any) -> Ends:
    parent, kids = waiting_parent(api, stack, sql)
    # The parent cancelled while its children were locked (the trigger skips them): here,
    # with the triggers off for this one statement, the orphans the sweeper looks for.
    sql.execute("SET session_replication_role = replica")
    sql.execute("UPDATE jobs SET state = 'cancelled', finished_at = now() WHERE id = %s", (parent,))
    sql.execute("SET session_replication_role = DEFAULT")

    async def go() -> None:
        async with engine_for(stack.settings) as engine:
            report = await sweeper.sweep_once(stack.settings, engine.db, engine.queue)
            assert report.orphans_cancelled == 3

    asyncio.run(go())
    assert all(job_row(sql, k)["state"] == "cancelled" for k in kids)
    return {("demo.nap", "cancelled"): 3}


def redrive_refused(api: Any, stack: Stack, sql: Any) -> Ends:
    job = post(api, "demo.flaky", {"permanent": True})
    handle(stack, sql, job, {"dead_lettered"})
    settings = stack.with_settings(redrive_budget=0)

    async def go() -> redrive.RedriveReport:
        async with engine_for(settings) as engine:
            return await redrive.redrive(settings, engine.db, engine.queue, job_ids=[job])

    report = asyncio.run(go())
    assert report.refused == [uuid.UUID(job)], report
    assert job_row(sql, job)["state"] == "dead_lettered"
    return {("demo.flaky", "dead_lettered"): 1}  # its one end; the refusal is none


PATHS: list[Callable[[Any, Stack, Any], Ends]] = [
    worker_success,
    worker_permanent_failure,
    worker_attempts_used_up,
    api_cancel_queued,
    api_cancel_waiting,
    api_cancel_waiting_parent_and_its_children,
    api_cancel_dead_letter,
    sweeper_dead_letters,
    sweeper_cancels_orphans,
    redrive_refused,
]


def moved(before: Figures, after: Figures, name: str) -> Ends:
    """How far each (kind, outcome) series of ``name`` moved (those that did)."""
    out: Ends = {}
    for (metric, labels), value in after.items():
        if metric == name:
            d = value - before.get((metric, labels), 0.0)
            if d:
                out[(dict(labels)["kind"], dict(labels)["outcome"])] = int(d)
    return out


@pytest.mark.parametrize("path", PATHS, ids=[p.__name__ for p in PATHS])
def test_every_end_is_counted_once_whatever_path_made_it(
    path: Callable[[Any, Stack, Any], Ends], api: Any, stack: Stack, sql: Any
) -> None:
    before = scrape(api)
    expected = path(api, stack, sql)
    after = scrape(api)
    assert moved(before, after, COMPLETED) == expected
    assert moved(before, after, DONE_COUNT) == expected  # submit-to-done: the same ends
