"""The issue's check: a high-priority job submitted behind 2,000 normal ones starts within
a second on the local stack (a real worker process, busy with the normal backlog).

The 2,000 normal jobs are written in one statement. Their messages go on the normal
queue: all 2,000 on LocalStack; on moto's server, whose every call scans the whole queue
(DESIGN.md, 2,000 sends take about 30 s there), the first BACKLOG_ON_MOTO of them, which
keeps the worker busy for the whole test just the same."""

from __future__ import annotations

import asyncio
import time
import uuid
from typing import Any

import pytest

from app import store
from app.store.jobs import Limits, NewRow
from tests.conftest import Stack, wait_for
from tests.helpers import routes

pytestmark = [pytest.mark.integration, pytest.mark.e2e]

BACKLOG = 2000
BACKLOG_ON_MOTO = 500
# Each normal job takes this long: the worker is busy with whole batches of them.
NORMAL_JOB = {"seconds": 0.05}
# The bound: within a second of its submission, the high job holds a lease.
WITHIN_SECONDS = 1.0


async def write_backlog(database_url: str, n: int) -> list[uuid.UUID]:
    rows = [
        NewRow(uuid.uuid4(), "demo.sleep", NORMAL_JOB, 3, 60, None, f"backlog-{i}")
        for i in range(n)
    ]
    async with store.connect(database_url, min_size=1, max_size=1) as db:
        written = await store.jobs.insert(
            db,
            rows,
            tenant="loud",
            limits=Limits(rate_per_second=1e6, burst=10**6, max_in_flight=10**6),
            key_id=None,
        )
    assert len(written.jobs) == n
    return [r.id for r in rows]


def send_backlog(stack: Stack, ids: list[uuid.UUID]) -> None:
    """The backlog's wake-up calls on the normal queue, in the loud tenant's group."""
    failed = stack.carrier(lambda t: t.send_jobs(routes(*ids, tenant="loud")))
    assert failed == [], failed


def started(sql: Any, tenant: str) -> int:
    return int(
        sql.execute(
            "SELECT count(*) AS n FROM jobs WHERE tenant = %s AND state <> 'queued'", (tenant,)
        ).fetchone()["n"]
    )


def test_a_high_job_behind_two_thousand_normal_ones_starts_within_a_second(
    stack: Stack, sql: Any, api: Any
) -> None:
    ids = asyncio.run(write_backlog(stack.database_url, BACKLOG))
    on_queue = ids[:BACKLOG_ON_MOTO] if stack.sqs_target == "moto" else ids
    send_backlog(stack, on_queue)
    stack.worker(concurrency=2)
    # The worker is at work on the backlog before the high job comes.
    wait_for(lambda: started(sql, "loud") >= 30, timeout=20, what="the backlog to start")

    t0 = time.monotonic()
    resp = api.post("/v1/jobs", json={"kind": "demo.noop", "payload": {}, "priority": "high"})
    assert resp.status_code == 202, resp.text
    high = resp.json()["id"]
    wait_for(
        lambda: (
            sql.execute("SELECT state FROM jobs WHERE id = %s", (high,)).fetchone()["state"]
            == "succeeded"
        ),
        timeout=10,
        what="the high-priority job to run",
    )
    # From the job's own timeline (the database's clock): submitted -> leased.
    row = sql.execute(
        "SELECT (SELECT min(at) FROM job_events WHERE job_id = j.id AND to_state = 'leased')"
        " - j.created_at AS waited FROM jobs j WHERE j.id = %s",
        (high,),
    ).fetchone()
    waited = row["waited"].total_seconds()
    backlog_started = started(sql, "loud")
    print(
        f"high job: leased {waited:.3f} s after its submission ({time.monotonic() - t0:.2f} s "
        f"to finish); {backlog_started} of {len(on_queue)} queued normal jobs started by then"
    )
    assert waited < WITHIN_SECONDS, f"the high job waited {waited:.3f} s for a lease"
    # The normal backlog is still largely unstarted: the high job did not wait its turn.
    assert backlog_started < len(on_queue) / 2, stack.logs()
