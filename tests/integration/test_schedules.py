"""Schedules on the real stack (PostgreSQL, moto's SQS server): the /v1/schedules routes
and their bad input, tenant isolation, and the sweeper making each due slot's job exactly
once with sweepers racing, late, paused and resumed.

A slot is made due by writing next_slot in the past (never by waiting for the clock).
"""

from __future__ import annotations

import asyncio
import datetime as dt
import uuid
from typing import TYPE_CHECKING, Any

import pytest

from app.services import schedules, sweeper
from tests.conftest import Stack, bearer
from tests.helpers import engine_for

if TYPE_CHECKING:
    from fastapi.testclient import TestClient

pytestmark = pytest.mark.integration

DAILY = {
    "name": "morning digest",
    "cron": "0 9 * * 1-5",
    "timezone": "Europe/Berlin",
    "kind": "demo.sleep",
    "payload": {"seconds": 0, "steps": 2},
}
EVERY_MINUTE = {"cron": "* * * * *", "kind": "demo.noop", "payload": {"n": 1}}
# Once a year: a test that names the slot a sweep makes must not see a minute end between
# make_due and the sweep, which would make an every-minute schedule's next minute the
# latest due slot instead.
YEARLY = {**EVERY_MINUTE, "cron": "0 0 1 1 *"}


def created(api: TestClient, body: dict[str, Any] = EVERY_MINUTE, **headers: str) -> Any:
    resp = api.post("/v1/schedules", json=body, headers=headers or None)
    assert resp.status_code == 201, resp.text
    return resp.json()


def schedule_row(sql: Any, schedule_id: Any) -> dict[str, Any]:
    row: dict[str, Any] = sql.execute(
        "SELECT * FROM schedules WHERE id = %s", (schedule_id,)
    ).fetchone()
    return row


def jobs_of(sql: Any, schedule_id: Any) -> list[dict[str, Any]]:
    return sql.execute(  # type: ignore[no-any-return]
        "SELECT j.*, o.sent_at FROM jobs j JOIN outbox o ON o.job_id = j.id "
        "WHERE j.idempotency_key LIKE %s ORDER BY j.created_at",
        (f"schedule:{schedule_id}:%",),
    ).fetchall()


def make_due(sql: Any, schedule_id: Any, *, minutes_late: int = 0) -> dt.datetime:
    """Move the schedule's next slot to a minute already passed; returns it."""
    row = sql.execute(
        "UPDATE schedules SET next_slot = date_trunc('minute', now()) - make_interval(mins => %s)"
        " WHERE id = %s RETURNING next_slot",
        (minutes_late, schedule_id),
    ).fetchone()
    return row["next_slot"]  # type: ignore[no-any-return]


def db_now(sql: Any) -> dt.datetime:
    return sql.execute("SELECT now() AS now").fetchone()["now"]  # type: ignore[no-any-return]


async def racing_sweeps(stack: Stack, count: int = 2) -> list[sweeper.SweepReport]:
    """``count`` sweeps at once, each with its own pool (as separate sweepers have), with
    the deployment's outbox grace: the tests' 0 lets one sweeper's relay send a copy of
    the message the other is sending (harmless, but the depth would not tell)."""
    settings = stack.settings.model_copy(update={"outbox_grace_seconds": 5.0})
    engines = [engine_for(settings) for _ in range(count)]
    opened = [await e.__aenter__() for e in engines]
    try:
        return list(
            await asyncio.gather(*(sweeper.sweep_once(settings, e.db, e.queue) for e in opened))
        )
    finally:
        for e in engines:
            await e.__aexit__(None, None, None)


async def sweep(stack: Stack) -> sweeper.SweepReport:
    (report,) = await racing_sweeps(stack, 1)
    return report


# --- the API ---------------------------------------------------------------------------


def test_create_read_list_pause_resume_delete(api: TestClient, sql: Any) -> None:
    before = db_now(sql)
    resp = api.post("/v1/schedules", json=DAILY)
    assert resp.status_code == 201, resp.text
    made = resp.json()
    assert resp.headers["Location"] == f"/v1/schedules/{made['id']}"
    assert (made["tenant"], made["name"], made["enabled"]) == ("acme", "morning digest", True)
    assert made["description"] == "At 09:00 on Monday through Friday"
    assert made["payload"] == {"seconds": 0, "steps": 2}
    # The next slots, in the schedule's time zone, from the first after now.
    upcoming = [dt.datetime.fromisoformat(s) for s in made["upcoming"]]
    assert len(upcoming) == schedules.UPCOMING
    assert upcoming == sorted(upcoming)
    assert dt.datetime.fromisoformat(made["next_slot"]) == upcoming[0] > before
    for slot in upcoming:
        assert (slot.hour, slot.minute) == (9, 0)
        assert slot.weekday() < 5
        assert slot.utcoffset() in (dt.timedelta(hours=1), dt.timedelta(hours=2))

    assert api.get(f"/v1/schedules/{made['id']}").json() == made
    assert [s["id"] for s in api.get("/v1/schedules").json()] == [made["id"]]

    paused = api.post(f"/v1/schedules/{made['id']}/pause").json()
    assert (paused["enabled"], paused["upcoming"]) == (False, [])
    assert api.post(f"/v1/schedules/{made['id']}/pause").json()["enabled"] is False
    resumed = api.post(f"/v1/schedules/{made['id']}/resume").json()
    assert resumed["enabled"] is True
    assert resumed["upcoming"] == made["upcoming"]  # the next weekday 09:00 is still ahead

    assert api.delete(f"/v1/schedules/{made['id']}").status_code == 204
    assert api.get(f"/v1/schedules/{made['id']}").status_code == 404
    assert api.delete(f"/v1/schedules/{made['id']}").status_code == 404
    assert schedule_row(sql, made["id"]) is None


BAD = [
    pytest.param({**DAILY, "cron": "61 * * * *"}, "cron: Bad minute", id="a minute out of range"),
    pytest.param({**DAILY, "cron": "0 9 * *"}, "cron: '0 9 * *' has 4 fields", id="four fields"),
    pytest.param({**DAILY, "cron": "0 0 9 * * 1"}, "has 6 fields", id="a seconds field"),
    pytest.param({**DAILY, "cron": "0 0 30 2 *"}, "cron: Bad day-of-month", id="never"),
    pytest.param({**DAILY, "cron": "0 9 * * *\x00"}, "cron", id="NUL in the cron"),
    pytest.param({**DAILY, "timezone": "Mars/Olympus"}, "timezone: 'Mars/Olympus'", id="tz"),
    pytest.param({**DAILY, "timezone": "America"}, "timezone: 'America'", id="a tz folder"),
    pytest.param({**DAILY, "kind": "no.such"}, "unknown job kind 'no.such'", id="kind"),
    pytest.param(
        {**DAILY, "payload": {"seconds": -1}}, "invalid payload for kind 'demo.sleep'", id="payload"
    ),
    pytest.param({**DAILY, "max_attempts": 0}, "max_attempts", id="max_attempts"),
    pytest.param({**DAILY, "name": ""}, "name", id="an empty name"),
    pytest.param({**DAILY, "every": "day"}, "every", id="an unknown field"),
    pytest.param({k: v for k, v in DAILY.items() if k != "cron"}, "cron", id="no cron"),
]


@pytest.mark.parametrize(("body", "named"), BAD)
def test_bad_input_is_a_422_naming_the_field_and_writes_nothing(
    api: TestClient, sql: Any, body: dict[str, Any], named: str
) -> None:
    resp = api.post("/v1/schedules", json=body)
    assert resp.status_code == 422, resp.text
    assert named in resp.json()["detail"]
    assert sql.execute("SELECT count(*) AS n FROM schedules").fetchone()["n"] == 0


def test_a_name_is_unique_per_tenant(api: TestClient, stack: Stack, sql: Any) -> None:
    created(api, DAILY)
    again = api.post("/v1/schedules", json=DAILY)
    assert again.status_code == 409
    assert "already has a schedule named 'morning digest'" in again.json()["detail"]
    # Another tenant may use the name; unnamed schedules are many.
    created(api, DAILY, **bearer(stack.key("globex")))
    created(api)
    created(api)
    assert sql.execute("SELECT count(*) AS n FROM schedules").fetchone()["n"] == 4


def test_another_tenants_schedule_is_404_and_an_admin_sees_every_tenant(
    api: TestClient, stack: Stack
) -> None:
    mine = created(api, DAILY)
    other = bearer(stack.key("globex"))
    path = f"/v1/schedules/{mine['id']}"
    for method, url in (
        ("GET", path),
        ("POST", f"{path}/pause"),
        ("POST", f"{path}/resume"),
        ("DELETE", path),
    ):
        resp = api.request(method, url, headers=other)
        assert resp.status_code == 404, (method, url, resp.text)
        assert resp.json()["detail"] == f"no schedule {mine['id']}"
    assert api.get("/v1/schedules", headers=other).json() == []
    assert api.get("/v1/schedules?tenant=acme", headers=other).status_code == 403
    assert api.get(path).json()["enabled"] is True  # untouched by the other tenant

    admin = bearer(stack.key("ops", admin=True))
    assert api.get(path, headers=admin).json()["id"] == mine["id"]
    theirs = created(api, DAILY, **other)
    listed = {s["id"]: s["tenant"] for s in api.get("/v1/schedules", headers=admin).json()}
    assert listed == {mine["id"]: "acme", theirs["id"]: "globex"}
    only = api.get("/v1/schedules?tenant=globex", headers=admin).json()
    assert [s["id"] for s in only] == [theirs["id"]]


# --- the sweeper -----------------------------------------------------------------------


@pytest.mark.asyncio
async def test_a_due_slot_makes_exactly_one_job_with_two_sweepers_racing(
    api: TestClient, stack: Stack, sql: Any
) -> None:
    made = created(api, YEARLY)
    slot = make_due(sql, made["id"])

    reports = await racing_sweeps(stack, 2)

    assert sorted(r.scheduled for r in reports) == [0, 1]
    (job,) = jobs_of(sql, made["id"])
    assert job["idempotency_key"] == schedules.slot_key(uuid.UUID(made["id"]), slot)
    assert (job["tenant"], job["kind"], job["payload"]) == ("acme", "demo.noop", {"n": 1})
    assert job["state"] == "queued"
    assert job["sent_at"] is not None  # the message went out at once
    assert stack.queue_depth() == 1
    row = schedule_row(sql, made["id"])
    assert (row["last_slot"], row["last_job_id"], row["last_error"]) == (slot, job["id"], None)
    assert row["next_slot"] > db_now(sql)
    # The slot is made: later sweeps make nothing more.
    assert (await sweep(stack)).scheduled == 0
    assert len(jobs_of(sql, made["id"])) == 1


@pytest.mark.asyncio
async def test_a_late_sweep_makes_only_the_latest_slot(
    api: TestClient, stack: Stack, sql: Any
) -> None:
    made = created(api)
    missed = make_due(sql, made["id"], minutes_late=7)  # seven slots missed, the 8th due
    before = db_now(sql).replace(second=0, microsecond=0)

    reports = await racing_sweeps(stack, 3)

    assert sorted(r.scheduled for r in reports) == [0, 0, 1]
    (job,) = jobs_of(sql, made["id"])
    row = schedule_row(sql, made["id"])
    # The latest due slot: this minute (or the next, had the clock just turned).
    assert row["last_slot"] >= before > missed
    assert job["idempotency_key"] == schedules.slot_key(uuid.UUID(made["id"]), row["last_slot"])
    assert row["next_slot"] == row["last_slot"] + dt.timedelta(minutes=1)


def test_two_sweep_processes_late_by_several_slots_make_one_job(
    api: TestClient, stack: Stack, sql: Any
) -> None:
    # Once a year: the two processes start seconds apart, and a minute that ends between
    # them must not make an every-minute schedule due again.
    made = created(api, YEARLY)
    make_due(sql, made["id"], minutes_late=5)
    procs = [stack.spawn("sweep", "--once", name="sweep") for _ in range(2)]
    for proc in procs:
        assert proc.wait(60) == 0, proc.log_path.read_text()  # type: ignore[attr-defined]
    outputs = [proc.log_path.read_text() for proc in procs]  # type: ignore[attr-defined]
    assert sorted("scheduled=1" in out for out in outputs) == [False, True], outputs
    (job,) = jobs_of(sql, made["id"])
    row = schedule_row(sql, made["id"])
    assert job["id"] == row["last_job_id"]
    assert job["idempotency_key"] == schedules.slot_key(uuid.UUID(made["id"]), row["last_slot"])
    assert row["next_slot"] > db_now(sql)


@pytest.mark.asyncio
async def test_pause_stops_slots_and_resume_starts_from_now(
    api: TestClient, stack: Stack, sql: Any
) -> None:
    # Once a year: a minute that ends between the resume and the sweep below must not
    # make the resumed schedule due again (an every-minute cron did, now and then).
    made = created(api, YEARLY)
    due = make_due(sql, made["id"], minutes_late=3)
    api.post(f"/v1/schedules/{made['id']}/pause")

    assert (await sweep(stack)).scheduled == 0
    assert jobs_of(sql, made["id"]) == []
    assert schedule_row(sql, made["id"])["next_slot"] == due  # untouched while paused

    before = db_now(sql)
    resumed = api.post(f"/v1/schedules/{made['id']}/resume").json()
    # From the first slot after now: the slots of the pause make no job.
    assert dt.datetime.fromisoformat(resumed["next_slot"]) > before
    assert (await sweep(stack)).scheduled == 0
    assert jobs_of(sql, made["id"]) == []

    # A resume of a schedule that is not paused keeps its due slot.
    due = make_due(sql, made["id"])
    kept = api.post(f"/v1/schedules/{made['id']}/resume").json()["next_slot"]
    assert dt.datetime.fromisoformat(kept) == due
    assert (await sweep(stack)).scheduled == 1
    assert len(jobs_of(sql, made["id"])) == 1


@pytest.mark.asyncio
async def test_a_slot_the_kind_refuses_makes_no_job_and_says_why(
    api: TestClient, stack: Stack, sql: Any
) -> None:
    made = created(api, DAILY)
    sql.execute("UPDATE schedules SET payload = '{\"seconds\": -5}' WHERE id = %s", (made["id"],))
    make_due(sql, made["id"])

    assert (await sweep(stack)).scheduled == 0

    assert jobs_of(sql, made["id"]) == []
    row = schedule_row(sql, made["id"])
    assert row["last_error"].startswith("slot ")
    assert "invalid payload for kind 'demo.sleep'" in row["last_error"]
    assert row["next_slot"] > db_now(sql)  # the next slot tries again
    assert api.get(f"/v1/schedules/{made['id']}").json()["last_error"] == row["last_error"]


@pytest.mark.asyncio
async def test_a_tenant_over_its_limits_keeps_its_slot_for_the_next_sweep(
    api: TestClient, stack: Stack, sql: Any
) -> None:
    made = created(api, YEARLY)
    sql.execute("INSERT INTO tenant_limits (tenant, max_in_flight) VALUES ('acme', 1)")
    assert api.post("/v1/jobs", json={"kind": "demo.noop", "payload": {}}).status_code == 202
    due = make_due(sql, made["id"])

    assert (await sweep(stack)).scheduled == 0
    row = schedule_row(sql, made["id"])
    assert row["next_slot"] == due
    assert "over its job limits" in row["last_error"]

    sql.execute("UPDATE tenant_limits SET max_in_flight = 10 WHERE tenant = 'acme'")
    assert (await sweep(stack)).scheduled == 1
    row = schedule_row(sql, made["id"])
    assert (row["last_slot"], row["last_error"]) == (due, None)


@pytest.mark.asyncio
async def test_a_tenant_over_its_limits_does_not_use_up_a_sweep_meant_for_others(
    api: TestClient, stack: Stack, sql: Any
) -> None:
    """A deferred schedule kept the head of the queue (oldest next_slot) and counted toward
    the sweep's takes: with enough of them, another tenant's schedule never ran."""
    mine = [created(api, {**EVERY_MINUTE, "payload": {"n": i}}) for i in range(3)]
    sql.execute("INSERT INTO tenant_limits (tenant, max_in_flight) VALUES ('acme', 1)")
    assert api.post("/v1/jobs", json={"kind": "demo.noop", "payload": {}}).status_code == 202
    for m in mine:
        make_due(sql, m["id"], minutes_late=5)
    theirs = created(api, EVERY_MINUTE, **bearer(stack.key("globex")))
    make_due(sql, theirs["id"])

    async with engine_for(stack.settings) as engine:
        made = await schedules.materialise_due(stack.settings, engine.db, engine.queue, limit=3)

    assert made == 1
    assert len(jobs_of(sql, theirs["id"])) == 1
    assert all(not jobs_of(sql, m["id"]) for m in mine)
