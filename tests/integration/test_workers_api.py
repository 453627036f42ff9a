"""GET /v1/workers and the counts of GET /v1/kinds against real PostgreSQL: a worker's
row written by the real Presence (registered, heartbeating, stopped), its status read
against the database's clock, the admin-only rule, the prune of old rows by retention;
the kinds' counts by state from the maintained counts, scoped to the key's tenant.
(A real worker process killed with SIGKILL: tests/e2e/test_workers_processes.py.)"""

from __future__ import annotations

import asyncio
import uuid
import warnings
from collections.abc import Iterator
from typing import Any

import pytest

from app import store
from app.api import create_app
from app.services import retention
from app.states import JobState
from app.worker.presence import Presence
from tests.conftest import Stack, bearer, run

with warnings.catch_warnings():
    warnings.filterwarnings("ignore", message="Using `httpx` with `starlette.testclient`")
    from fastapi.testclient import TestClient

pytestmark = [pytest.mark.integration, pytest.mark.carrier_neutral]


@pytest.fixture
def client(stack: Stack) -> Iterator[TestClient]:
    settings = stack.with_settings(worker_heartbeat_seconds=0.2, worker_gone_seconds=1.5)
    with TestClient(create_app(settings)) as c:
        yield c


def workers(client: TestClient, key: str) -> list[dict[str, Any]]:
    resp = client.get("/v1/workers", headers=bearer(key))
    assert resp.status_code == 200, resp.text
    rows: list[dict[str, Any]] = resp.json()["workers"]
    return rows


def test_a_worker_registers_heartbeats_and_stops_and_only_an_admin_lists_it(
    stack: Stack, client: TestClient, sql: Any
) -> None:
    admin, acme = stack.key("ops", admin=True), stack.key("acme")
    settings = stack.with_settings(worker_heartbeat_seconds=0.2, worker_gone_seconds=1.5)
    seen: dict[str, Any] = {}

    async def live() -> str:
        async with store.connect(stack.database_url) as db:
            running = iter(range(100))
            presence = Presence(settings, db, lambda: next(running))
            async with presence.kept():
                first = sql.execute(
                    "SELECT last_seen, running FROM workers WHERE id = %s", (presence.me.id,)
                ).fetchone()
                await asyncio.sleep(0.7)  # three heartbeats or so
                # The API, read while it lives (in a thread: the TestClient runs its own loop).
                seen["alive"] = await asyncio.to_thread(workers, client, admin)
                later = sql.execute(
                    "SELECT last_seen, running FROM workers WHERE id = %s", (presence.me.id,)
                ).fetchone()
                assert later["last_seen"] > first["last_seen"]
                assert later["running"] > first["running"]  # each beat wrote the count anew
            return presence.me.id

    worker_id = run(live())

    (row,) = [w for w in seen["alive"] if w["id"] == worker_id]
    assert row["status"] == "alive"
    assert row["runtime"] == "process"
    assert row["name"] == settings.worker_id
    assert row["carrier"] == settings.transport
    assert row["version"] and row["pid"] > 0 and row["host"]
    assert row["stopped_at"] is None
    (after,) = [w for w in workers(client, admin) if w["id"] == worker_id]
    assert after["status"] == "stopped"
    assert after["running"] == 0
    assert after["stopped_at"] is not None

    # A tenant key is refused, saying why; the rows are as they were.
    before = sql.execute("SELECT * FROM workers ORDER BY id").fetchall()
    refused = client.get("/v1/workers", headers=bearer(acme))
    assert refused.status_code == 403
    assert "admin" in refused.json()["detail"]
    assert sql.execute("SELECT * FROM workers ORDER BY id").fetchall() == before


def test_a_silent_worker_reads_as_gone_and_an_idle_lambda_environment_as_idle(
    stack: Stack, client: TestClient, sql: Any
) -> None:
    admin = stack.key("ops", admin=True)
    sql.execute(
        "INSERT INTO workers (id, name, runtime, host, pid, carrier, version, running, last_seen)"
        " VALUES ('w-silent', 'w', 'process', 'h', 1, 'sqs', '0', 2, now() - interval '5 s'),"
        " ('w-fresh', 'w', 'process', 'h', 2, 'sqs', '0', 1, now()),"
        " ('lambda:f:s', 'f', 'lambda', 's', 3, 'sqs', '0', 0, now() - interval '5 s')"
    )
    by_id = {w["id"]: w for w in workers(client, admin)}
    assert by_id["w-silent"]["status"] == "gone"  # past the 1.5 s bound
    assert by_id["w-silent"]["seen_seconds_ago"] >= 5
    assert by_id["w-fresh"]["status"] == "alive"
    assert by_id["lambda:f:s"]["status"] == "idle"
    # Most recently seen first.
    assert workers(client, admin)[0]["id"] == "w-fresh"


def test_the_prune_deletes_workers_not_seen_within_their_retention(stack: Stack, sql: Any) -> None:
    sql.execute(
        "INSERT INTO workers (id, name, runtime, host, pid, carrier, version, last_seen)"
        " VALUES ('old', 'w', 'process', 'h', 1, 'sqs', '0', now() - interval '8 days'),"
        " ('recent', 'w', 'process', 'h', 2, 'sqs', '0', now() - interval '6 days')"
    )
    settings = stack.with_settings(retain_workers_seconds=7 * 86_400)

    async def prune() -> retention.PruneReport:
        async with store.connect(stack.database_url) as db:
            return await retention.prune(settings, db)

    report = run(prune())

    assert report.workers == 1
    assert [r["id"] for r in sql.execute("SELECT id FROM workers")] == ["recent"]
    # 0 keeps them forever.
    sql.execute("UPDATE workers SET last_seen = now() - interval '900 days'")
    forever = stack.with_settings(retain_workers_seconds=0)

    async def keep() -> retention.PruneReport:
        async with store.connect(stack.database_url) as db:
            return await retention.prune(forever, db)

    assert run(keep()).workers == 0
    assert sql.execute("SELECT count(*) AS n FROM workers").fetchone()["n"] == 1


def test_kinds_count_their_jobs_by_state_for_the_keys_tenant(
    stack: Stack, client: TestClient, sql: Any
) -> None:
    acme, globex, admin = stack.key("acme"), stack.key("globex"), stack.key("ops", admin=True)
    for key, n in ((acme, 2), (globex, 3)):
        for _ in range(n):
            resp = client.post(
                "/v1/jobs", json={"kind": "demo.noop", "payload": {}}, headers=bearer(key)
            )
            assert resp.status_code == 202, resp.text
    one = client.post("/v1/jobs", json={"kind": "demo.sleep", "payload": {}}, headers=bearer(acme))
    sql.execute(
        "UPDATE jobs SET state = 'cancelled', finished_at = now() WHERE id = %s",
        (one.json()["id"],),
    )

    def counts(key: str, **params: str) -> dict[str, dict[str, int]]:
        resp = client.get("/v1/kinds", params=params, headers=bearer(key))
        assert resp.status_code == 200, resp.text
        return {k["name"]: k["counts"] for k in resp.json()["kinds"]}

    mine = counts(acme)
    assert set(mine["demo.noop"]) == {s.value for s in JobState}  # every state named
    assert mine["demo.noop"]["queued"] == 2
    assert mine["demo.sleep"]["cancelled"] == 1 and mine["demo.sleep"]["queued"] == 0
    assert counts(globex)["demo.noop"]["queued"] == 3
    assert counts(globex)["demo.sleep"]["cancelled"] == 0
    assert counts(admin)["demo.noop"]["queued"] == 5
    assert counts(admin, tenant="globex")["demo.noop"]["queued"] == 3
    # The same after the sweeper's fold moved the appended changes into the totals.

    async def fold() -> None:
        async with store.connect(stack.database_url) as db:
            await store.gauges.fold(db)

    run(fold())
    assert sql.execute("SELECT count(*) AS n FROM job_count_deltas").fetchone()["n"] == 0
    assert counts(admin)["demo.noop"]["queued"] == 5
    assert counts(acme)["demo.sleep"]["cancelled"] == 1
    # A tenant key naming another tenant: 403, nothing read.
    other = client.get("/v1/kinds", params={"tenant": "globex"}, headers=bearer(acme))
    assert other.status_code == 403
    assert "own tenant" in other.json()["detail"]


def test_the_prune_deletes_bulk_operations_finished_past_their_retention(
    stack: Stack, sql: Any
) -> None:
    def op(state: str, finished_days_ago: int | None) -> str:
        op_id = str(uuid.uuid4())
        sql.execute(
            "INSERT INTO bulk_operations (id, action, filter, caller, state, total, "
            "finished_at, created_at) VALUES (%s, 'cancel', '{}', 'test', %s, 0, "
            "now() - make_interval(days => %s), now() - interval '400 days')",
            (op_id, state, finished_days_ago),
        )
        return op_id

    old_done, old_failed = op("done", 31), op("failed", 40)
    recent, running = op("done", 29), op("running", None)  # a running one: however old
    settings = stack.with_settings(retain_bulk_operations_seconds=30 * 86_400, prune_batch_size=1)

    async def prune(settings: Any) -> retention.PruneReport:
        async with store.connect(stack.database_url) as db:
            return await retention.prune(settings, db)

    assert run(prune(settings)).bulk_operations == 2  # in batches of one
    left = {r["id"] for r in sql.execute("SELECT id::text AS id FROM bulk_operations")}
    assert left == {recent, running} and not left & {old_done, old_failed}
    # 0 keeps them forever.
    sql.execute("UPDATE bulk_operations SET finished_at = now() - interval '900 days'")
    forever = stack.with_settings(retain_bulk_operations_seconds=0)
    assert run(prune(forever)).bulk_operations == 0
    assert sql.execute("SELECT count(*) AS n FROM bulk_operations").fetchone()["n"] == 2


def test_kinds_list_the_versions_served_and_their_policy(client: TestClient, stack: Stack) -> None:
    from tests.versioned_kinds import deployed, pinned_v1, pinned_v2

    key = stack.key("acme")
    with deployed(pinned_v1, pinned_v2):
        resp = client.get("/v1/kinds", headers=bearer(key))
    assert resp.status_code == 200, resp.text
    by_name = {k["name"]: k for k in resp.json()["kinds"]}
    pinned = by_name["shop.pinned"]
    assert (pinned["version"], pinned["versions"], pinned["on_version_change"]) == (
        "2",
        ["1", "2"],
        "pin",
    )
    noop = by_name["demo.noop"]  # a kind that declares none: version "1", resumed
    assert (noop["version"], noop["versions"], noop["on_version_change"]) == ("1", ["1"], "resume")
