"""Kind versions through the real worker, on each carrier the suite runs: a job keeps
the version it started on (its JSON shows it), and a kind redeployed under waiting jobs
does what its policy says, a diverging replay stopped with a clear error
(docs/howto/kind-versions.md; in memory: tests/unit/test_kind_versions_memory.py)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterable
from typing import Any

import pytest

from app.services import callbacks
from app.services.submit import NewJob, submit_many
from app.states import JobState
from app.worker import versions
from app.worker.engine import Engine
from tests.conftest import Stack, job_row
from tests.helpers import drain, engine_for, handle_and_ack, receive_records, submit
from tests.versioned_kinds import (
    deployed,
    order_model_charge,
    order_no_charge,
    order_patched,
    order_v1,
    pinned_v1,
    pinned_v2,
)

pytestmark = pytest.mark.integration


WAITING = "SELECT count(*) AS n FROM jobs WHERE id = ANY(%s::uuid[]) AND state = 'waiting'"
# The jobs handed back unrun, queued, by a worker that does not serve their version.
HANDED_BACK = (
    "SELECT count(*) AS n FROM jobs j WHERE id = ANY(%s::uuid[]) AND state = 'queued' "
    "AND EXISTS (SELECT 1 FROM job_events e WHERE e.job_id = j.id AND e.to_state = 'queued' "
    "AND e.detail LIKE 'kind ''shop.pinned'' is pinned: %%')"
)


async def until_waiting(engine: Engine, sql: Any, job_ids: list[Any], query: str = WAITING) -> None:
    """Handle messages until ``query`` counts every job (by default: waiting for its
    callback; the caller asserts it)."""
    end = time.monotonic() + 60
    while time.monotonic() < end:
        found = sql.execute(query, ([str(j) for j in job_ids],)).fetchone()
        if found["n"] == len(job_ids):
            return
        records = await receive_records(engine, wait=1)
        if records:
            await handle_and_ack(engine, records)


async def answer(engine: Engine, job_ids: Iterable[Any]) -> None:
    """Answer each job's callback "go" (which wakes it), the answers side by side."""

    async def one(job_id: Any) -> None:
        token = await callbacks.token_for(engine.db, job_id, "go")
        await callbacks.answer(engine.db, engine.queue, token, result=True)

    await asyncio.gather(*(one(j) for j in job_ids))


def effects_of(sql: Any, job_id: Any) -> dict[str, str | None]:
    rows = sql.execute("SELECT key, shape FROM effects WHERE job_id = %s ORDER BY seq", (job_id,))
    return {r["key"]: r["shape"] for r in rows.fetchall()}


@pytest.mark.asyncio
async def test_a_job_keeps_its_version_and_a_replay_that_diverges_dead_letters_it(
    stack: Stack, sql: Any, api: Any
) -> None:
    async with engine_for(stack.settings) as engine:
        with deployed(order_v1):
            posted = [
                api.post("/v1/jobs", json={"kind": "shop.order", "payload": {}}) for _ in "ab"
            ]
            assert posted[0].json()["kind_version"] is None  # not started yet
            reshaped, dropped = [p.json()["id"] for p in posted]
            await until_waiting(engine, sql, [reshaped, dropped])
        assert api.get(f"/v1/jobs/{reshaped}").json()["kind_version"] == "1"
        assert effects_of(sql, reshaped) == {"charge": "effect", "callback:go": "callback"}

        # Given version 2 asking a model under the key version 1 charged under
        with deployed(order_model_charge):
            await answer(engine, [reshaped])
            await drain(engine, sql, [reshaped])
        # Then the job stops at that step, the model never asked
        row = job_row(sql, reshaped)
        assert (row["state"], row["kind_version"]) == (JobState.DEAD_LETTERED, "1")
        assert row["last_error"] == (
            "permanent: replay diverged at step 'charge': recorded as effect by the job's "
            "version 1, reached as model_call by version 2; nothing of it ran again "
            "(docs/howto/kind-versions.md)"
        )
        assert effects_of(sql, reshaped) == {"charge": "effect", "callback:go": "callback"}

        # Given version 2 without the charge: the job ends without reaching it
        with deployed(order_no_charge):
            await answer(engine, [dropped])
            await drain(engine, sql, [dropped])
        row = job_row(sql, dropped)
        assert (row["state"], row["result"]) == (JobState.DEAD_LETTERED, None)
        assert row["last_error"] == (
            "permanent: replay diverged: the code (version 2) returned without reaching "
            "recorded step 'charge', recorded as effect by the job's version 1; the result "
            "was not stored (docs/howto/kind-versions.md)"
        )


WAITING_JOBS = 100


async def submit_waiting(engine: Engine, sql: Any, kind: str) -> list[Any]:
    """WAITING_JOBS jobs of ``kind`` (one submission), each waiting for its callback."""
    jobs = [NewJob(kind, {}) for _ in range(WAITING_JOBS)]
    made = await submit_many(engine.settings, engine.db, engine.queue, jobs)
    job_ids = [m.job["id"] for m in made]
    await until_waiting(engine, sql, job_ids)
    return job_ids


def jobs_of(sql: Any, job_ids: list[Any]) -> list[dict[str, Any]]:
    return sql.execute(
        "SELECT j.*, (SELECT array_agg(e.key ORDER BY e.seq) FROM effects e "
        "WHERE e.job_id = j.id) AS steps FROM jobs j WHERE j.id = ANY(%s::uuid[])",
        ([str(j) for j in job_ids],),
    ).fetchall()


@pytest.mark.asyncio
async def test_a_kind_redeployed_under_100_waiting_jobs_resumes_them_on_the_new_code(
    stack: Stack, sql: Any
) -> None:
    """on_version_change="resume": version 2 adds a tax step before the wait (behind these
    jobs: patched says no) and a receipt after it (ahead of them: patched says yes)."""
    async with engine_for(stack.settings) as engine:
        with deployed(order_v1):
            job_ids = await submit_waiting(engine, sql, "shop.order")
        with deployed(order_patched):
            await answer(engine, job_ids)
            await drain(engine, sql, job_ids, deadline=60)
    rows = jobs_of(sql, job_ids)
    assert {(r["state"], r["result"], r["kind_version"], r["attempt"]) for r in rows} == {
        (JobState.SUCCEEDED, "v2", "1", 1)
    }
    assert {tuple(r["steps"]) for r in rows} == {
        ("charge", "callback:go", "patch:receipt", "receipt", "ship")
    }


@pytest.mark.asyncio
async def test_a_pinned_kind_redeployed_under_100_waiting_jobs_runs_them_on_their_version(
    stack: Stack, sql: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """on_version_change="pin": a worker serving only version 2 hands the jobs of version
    1 back unrun (no attempt used); one serving both runs each on its own version."""
    # Long enough for the worker to hand back all 100 before the first come back, short
    # enough not to wait long for the worker serving both.
    monkeypatch.setattr(versions, "NOT_SERVED_VISIBILITY_SECONDS", 3)
    async with engine_for(stack.settings) as engine:
        with deployed(pinned_v1):
            job_ids = await submit_waiting(engine, sql, "shop.pinned")
        with deployed(pinned_v2):
            await answer(engine, job_ids)
            await until_waiting(engine, sql, job_ids, HANDED_BACK)
            rows = jobs_of(sql, job_ids)
            assert {(r["state"], r["attempt"], r["runs"]) for r in rows} == {
                (JobState.QUEUED, 0, 1)
            }
            assert {tuple(r["steps"]) for r in rows} == {("charge", "callback:go")}
            assert sql.execute(
                "SELECT detail FROM job_events WHERE job_id = %s AND to_state = 'queued' "
                "ORDER BY id DESC LIMIT 1",
                (job_ids[0],),
            ).fetchone()["detail"] == (
                "kind 'shop.pinned' is pinned: this job started on version 1, and this "
                "worker serves version 2: handed back for a worker that serves it"
            )
        with deployed(pinned_v1, pinned_v2):
            # (another tenant: this one just submitted its burst)
            newer = await submit(engine, "shop.pinned", {}, tenant="newer")
            await drain(engine, sql, job_ids, deadline=60)
            await until_waiting(engine, sql, [newer])
    rows = jobs_of(sql, job_ids)
    assert {(r["state"], r["result"], r["kind_version"], r["attempt"]) for r in rows} == {
        (JobState.SUCCEEDED, "v1", "1", 1)
    }
    assert job_row(sql, newer)["kind_version"] == "2"  # a new job starts on the newest


@pytest.mark.sqs_only  # SQS's maxReceiveCount moves a message to the DLQ
@pytest.mark.asyncio
async def test_a_pinned_job_bounced_near_max_receive_count_gets_a_fresh_message(
    stack: Stack, sql: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A pinned job no worker of its version claims for long is handed back again and
    again: near the queue's maxReceiveCount its message is replaced by a fresh one (the
    old one deleted), so the redrive policy never moves it to the DLQ."""
    monkeypatch.setattr(versions, "NOT_SERVED_VISIBILITY_SECONDS", 1)
    async with engine_for(stack.settings) as engine:
        with deployed(pinned_v1):
            job_id = await submit(engine, "shop.pinned", {})
            await until_waiting(engine, sql, [job_id])
        with deployed(pinned_v2):
            await answer(engine, [job_id])
            records: list[dict[str, Any]] = []
            while not records:
                records = await receive_records(engine, wait=1)
            [record] = records
            # As if it had bounced this often already.
            count = engine.settings.max_receive_count - 1
            record["attributes"]["ApproximateReceiveCount"] = str(count)
            await handle_and_ack(engine, records)
            assert job_row(sql, job_id)["state"] == JobState.QUEUED
            fresh: list[dict[str, Any]] = []
            end = time.monotonic() + 30
            while not fresh and time.monotonic() < end:
                fresh = await receive_records(engine, wait=1)
        [again] = fresh
        assert again["messageId"] != record["messageId"]  # the old one was deleted
        assert again["attributes"]["ApproximateReceiveCount"] == "1"
        with deployed(pinned_v1, pinned_v2):
            await handle_and_ack(engine, fresh)
    row = job_row(sql, job_id)
    assert (row["state"], row["result"], row["kind_version"]) == (JobState.SUCCEEDED, "v1", "1")


class DrainContext:
    """An invocation through the worker function's drain alias (infra/lambda.tf)."""

    invoked_function_arn = "arn:aws:lambda:us-east-1:000000000000:function:tasklease-worker:drain"

    def get_remaining_time_in_millis(self) -> int:
        return 600_000


@pytest.mark.parametrize("how", ["alias", "setting"])
@pytest.mark.asyncio
async def test_a_drain_worker_runs_only_started_jobs_on_their_versions(
    stack: Stack, sql: Any, monkeypatch: pytest.MonkeyPatch, how: str
) -> None:
    """A drain worker (older code kept while its jobs finish: invoked through the alias
    "drain", or a pool with TASKLEASE_WORKER_DRAIN) runs a started job on the version it
    started on, whatever policy its code declared, and hands back unrun a new job (the
    current code starts it) and one of a kind it does not know (the current code's)."""
    monkeypatch.setattr(versions, "DRAIN_HANDBACK_SECONDS", 0)
    settings = stack.with_settings(worker_drain=how == "setting")
    context = DrainContext() if how == "alias" else None

    async def through_drain(engine: Engine, job_id: Any) -> None:
        """Handle what the queue holds as the drain worker until ``job_id``'s message
        was among it (others, handed back at once, may come along)."""
        records: list[dict[str, Any]] = []
        end = time.monotonic() + 30
        while time.monotonic() < end and not any(str(job_id) in r["body"] for r in records):
            if job_row(sql, job_id)["state"] == JobState.SUCCEEDED:
                return  # its message came along with another's
            records = await receive_records(engine, wait=1)
        response = await engine.handle({"Records": records}, context)
        failed = {f["itemIdentifier"] for f in response["batchItemFailures"]}
        done = [r["receiptHandle"] for r in records if r["messageId"] not in failed]
        if done:
            await engine.queue.delete_batch(done)

    async with engine_for(stack.settings) as current, engine_for(settings) as drain:
        with deployed(pinned_v1, order_v1):
            pinned = await submit(current, "shop.pinned", {})
            resumed = await submit(current, "shop.order", {})
            await until_waiting(current, sql, [pinned, resumed])
            await answer(current, [pinned, resumed])
            await through_drain(drain, pinned)
            await through_drain(drain, resumed)
            fresh = await submit(current, "shop.pinned", {})
            await through_drain(drain, fresh)
            unknown = await submit(current, "shop.order", {})
        with deployed(pinned_v1):  # the drain's code has no shop.order
            await through_drain(drain, unknown)
    for job_id, result in ((pinned, "v1"), (resumed, "v1")):
        row = job_row(sql, job_id)
        assert (row["state"], row["result"], row["kind_version"]) == (
            JobState.SUCCEEDED,
            result,
            "1",
        )
    for job_id in (fresh, unknown):
        row = job_row(sql, job_id)
        assert (row["state"], row["attempt"], row["kind_version"]) == (JobState.QUEUED, 0, None)
        detail = sql.execute(
            "SELECT detail FROM job_events WHERE job_id = %s ORDER BY id DESC LIMIT 1", (job_id,)
        ).fetchone()["detail"]
        assert detail.startswith(
            "a drain worker runs only jobs that started on a version it serves"
        )
