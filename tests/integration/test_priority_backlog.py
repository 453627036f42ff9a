"""The issue's check: a high-priority job submitted behind 2,000 normal ones is served
ahead of them by a real worker process busy with the normal backlog.

How soon, in seconds, is the benchmark's to say (`make bench`, bench/fairness.py: "started
within a second"); a timed assertion here failed on a loaded CI runner (1.17 s). What the
test checks is the mechanism, whatever the machine's speed: between the high job's
submission and its lease, each of the worker's pollers starts at most a few batches of
normal jobs (the batch in hand, a turn whose short poll of the high queue came just before
the message, the one normal turn the 6/3/1 weights allow in a row), where first-come
first-served would start the whole backlog ahead of it.

The 2,000 normal jobs are written in one statement. Their messages go on the normal
queue: all 2,000 on LocalStack; on moto's server, whose every call scans the whole queue
(docs/explain/design.md#local: 2,000 sends take about 30 s there), the first BACKLOG_ON_MOTO of them, which
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
CONCURRENCY = 2
# Normal batches a poller may start between the high job's submission and its lease.
BATCHES_AHEAD = 4


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


def first_leased(sql: Any, tenant: str, after: Any, before: Any) -> int:
    """The tenant's jobs first leased between the two times (the database's clock)."""
    return int(
        sql.execute(
            "SELECT count(*) AS n FROM jobs j WHERE j.tenant = %s AND (SELECT min(at) FROM"
            " job_events e WHERE e.job_id = j.id AND e.to_state = 'leased') BETWEEN %s AND %s",
            (tenant, after, before),
        ).fetchone()["n"]
    )


def test_a_high_job_behind_two_thousand_normal_ones_is_served_ahead_of_them(
    stack: Stack, sql: Any, api: Any
) -> None:
    ids = asyncio.run(write_backlog(stack.database_url, BACKLOG))
    on_queue = ids[:BACKLOG_ON_MOTO] if stack.sqs_target == "moto" else ids
    send_backlog(stack, on_queue)
    stack.worker(concurrency=CONCURRENCY)
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
        "SELECT j.created_at, (SELECT min(at) FROM job_events WHERE job_id = j.id"
        " AND to_state = 'leased') AS leased FROM jobs j WHERE j.id = %s",
        (high,),
    ).fetchone()
    ahead = first_leased(sql, "loud", row["created_at"], row["leased"])
    backlog_started = started(sql, "loud")
    print(
        f"high job: leased {(row['leased'] - row['created_at']).total_seconds():.3f} s after"
        f" its submission ({time.monotonic() - t0:.2f} s to finish); {ahead} normal jobs"
        f" leased in between; {backlog_started} of {len(on_queue)} started by then"
    )
    bound = BATCHES_AHEAD * CONCURRENCY * stack.settings.batch_size
    assert ahead <= bound < len(on_queue) - backlog_started, (ahead, bound, stack.logs())
    # The normal backlog is still largely unstarted: the high job did not wait its turn.
    assert backlog_started < len(on_queue) / 2, stack.logs()
