"""Search (GET /v1/jobs with filters) and bulk actions (POST /v1/bulk, GET /v1/bulk/{id})
over HTTP in this process, against the test's real PostgreSQL and SQS server: every
filter finds what it names and nothing else, a bad filter is refused naming what is
wrong and changes nothing, a bulk cancel or redrive acts on exactly the matching jobs of
the caller's tenant, in batches, once, and says so on each job's timeline."""

from __future__ import annotations

import datetime as dt
import time
from typing import Any

import pytest

from tests.conftest import bearer, job_row
from tests.integration.test_auth import (  # noqa: F401 (the fixture)
    Tenants,
    dead_lettered_job,
    snapshot,
    submit,
    tenants,
)

pytestmark = [pytest.mark.integration, pytest.mark.carrier_neutral]


def noop(payload: dict[str, Any]) -> dict[str, Any]:
    return {"kind": "demo.noop", "payload": payload}


def ids(t: Tenants, key: str, **params: Any) -> list[str]:
    resp = t.client.get("/v1/jobs", params=params, headers=bearer(key))
    assert resp.status_code == 200, resp.text
    return [j["id"] for j in resp.json()["items"]]


def test_each_filter_finds_what_it_names_and_nothing_else(
    tenants: Tenants,  # noqa: F811 (the fixture imported above)
    sql: Any,
) -> None:
    t = tenants
    u42 = submit(t, t.acme, noop({"user_id": "u-42", "meta": {"n": 3}}))
    u7 = submit(t, t.acme, noop({"user_id": "u-7", "meta": {"n": "3"}}))
    keyed = submit(t, t.acme, noop({"user_id": "u-8"}), **{"Idempotency-Key": "order-9"})
    sleeper = submit(t, t.acme, {"kind": "demo.sleep", "payload": {"seconds": 1}})
    theirs = submit(t, t.globex, noop({"user_id": "u-42"}))
    dead = dead_lettered_job(t, sql, t.acme)
    sql.execute("UPDATE jobs SET last_error = %s WHERE id = %s", ("Timeout: the 50% mark", dead))

    # A payload field: text, and a JSON value (3 the number is not "3" the text).
    assert ids(t, t.acme, **{"payload.user_id": "u-42"}) == [u42]
    assert ids(t, t.acme, **{"payload_json.meta.n": "3"}) == [u42]
    assert ids(t, t.acme, **{"payload.meta.n": "3"}) == [u7]
    assert sorted(ids(t, t.admin, **{"payload.user_id": "u-42"})) == sorted([u42, theirs])
    # An id, its prefix (dashes or not, any case), an idempotency key.
    assert ids(t, t.acme, id=u7) == [u7]
    assert u7 in ids(t, t.acme, id=u7[:8].upper())
    assert ids(t, t.acme, id=u7.replace("-", "")[:20]) == [u7]
    assert ids(t, t.acme, id=theirs) == []  # another tenant's: not found, not an error
    assert ids(t, t.acme, idempotency_key="order-9") == [keyed]
    assert ids(t, t.admin, idempotency_key="order-9") == [keyed]
    # Kind, states (several), text in the error (its % taken literally, any case).
    assert ids(t, t.acme, kind="demo.sleep") == [sleeper]
    assert sorted(ids(t, t.acme, state=["dead_lettered", "succeeded"])) == [dead]
    assert ids(t, t.acme, error="50% MARK") == [dead]
    assert ids(t, t.acme, error="5%") == []
    # Time ranges: created, finished.
    mid = job_row(sql, keyed)["created_at"]
    after = ids(t, t.acme, created_after=mid.isoformat())
    assert set(after) == {keyed, sleeper, dead}
    assert set(ids(t, t.acme, created_before=mid.isoformat())) == {u42, u7}
    since = (dt.datetime.now(dt.UTC) - dt.timedelta(minutes=5)).isoformat()
    assert ids(t, t.acme, finished_after=since) == [dead]
    # Filters together.
    assert ids(t, t.acme, kind="demo.noop", **{"payload.user_id": "u-8"}) == [keyed]
    assert ids(t, t.acme, kind="demo.sleep", **{"payload.user_id": "u-8"}) == []


def test_a_search_pages_by_its_own_cursor_only(
    tenants: Tenants,  # noqa: F811 (the fixture imported above)
) -> None:
    t = tenants
    made = [submit(t, t.acme, noop({"batch": "b1"})) for _ in range(5)]
    seen: list[str] = []
    cursor = None
    while True:
        params: dict[str, Any] = {"payload.batch": "b1", "limit": 2}
        if cursor:
            params["cursor"] = cursor
        page = t.client.get("/v1/jobs", params=params, headers=bearer(t.acme)).json()
        seen += [j["id"] for j in page["items"]]
        cursor = page["next_cursor"]
        if cursor is None:
            break
        # The cursor of this search is refused for another search.
        other = t.client.get(
            "/v1/jobs", params={"payload.batch": "b2", "cursor": cursor}, headers=bearer(t.acme)
        )
        assert other.status_code == 422, other.text
    assert seen == list(reversed(made))


@pytest.mark.parametrize(
    ("params", "named"),
    [
        ({"id": "xyz"}, "id 'xyz' is not a job id"),
        ({"payload.bad key": "1"}, "payload field 'bad key'"),
        ({"payload_json.n": "{1"}, "payload_json.n is not JSON"),
        ({"payload_json.n": "[1]"}, "payload_json.n must be a JSON scalar"),
        ({"state": "sleeping"}, "state"),
        ({"created_after": "yesterday"}, "created_after"),
        ({"created_after": "2026-01-02T03:04:05"}, "created_after needs a time zone"),
        ({"payload.a": "1", "payload.a.b": "2"}, "collides"),
        ({"payload_json.n": "NaN"}, "numbers must be finite"),
        ({"payload_json.n": "1e999"}, "numbers must be finite"),
    ],
)
def test_a_bad_filter_is_refused_naming_what_is_wrong(
    tenants: Tenants,  # noqa: F811 (the fixture imported above)
    params: dict[str, str],
    named: str,
) -> None:
    resp = tenants.client.get("/v1/jobs", params=params, headers=bearer(tenants.acme))
    assert resp.status_code == 422, resp.text
    assert named in resp.text


def bulk(t: Tenants, key: str, body: dict[str, Any]) -> Any:
    return t.client.post("/v1/bulk", json=body, headers=bearer(key))


def finished(t: Tenants, key: str, op_id: str, timeout: float = 30) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while True:
        op = t.client.get(f"/v1/bulk/{op_id}", headers=bearer(key)).json()
        if op["state"] != "running" or time.monotonic() > deadline:
            return dict(op)
        time.sleep(0.1)


def test_a_bulk_cancel_by_filter_acts_on_the_tenants_matching_jobs_once(
    tenants: Tenants,  # noqa: F811 (the fixture imported above)
    sql: Any,
) -> None:
    t = tenants
    mine = [submit(t, t.acme, noop({"team": "red"})) for _ in range(7)]
    other_kind = submit(t, t.acme, {"kind": "demo.sleep", "payload": {}})
    blue = submit(t, t.acme, noop({"team": "blue"}))
    theirs = submit(t, t.globex, noop({"team": "red"}))
    done = submit(t, t.acme, noop({"team": "red"}))
    sql.execute("UPDATE jobs SET state = 'succeeded', finished_at = now() WHERE id = %s", (done,))
    body = {"action": "cancel", "filter": {"kind": "demo.noop", "payload": {"team": "red"}}}

    # The dry run counts (the succeeded one is not cancellable: not counted) and changes nothing.
    before = snapshot(sql)
    dry = bulk(t, t.acme, {**body, "dry_run": True})
    assert dry.status_code == 202, dry.text
    assert dry.json() == {"dry_run": True, "total": 7, "operation": None}
    assert snapshot(sql) == before

    # A tenant key naming another tenant is refused; an unknown action too.
    other = bulk(t, t.acme, {**body, "filter": {**body["filter"], "tenant": "globex"}})
    assert other.status_code == 403, other.text
    assert bulk(t, t.acme, {**body, "action": "explode"}).status_code == 422
    refused = bulk(t, t.acme, {"action": "redrive", "filter": {"states": ["queued"]}})
    assert refused.status_code == 422 and "redrive acts on" in refused.text

    # The run (several batches, and a crash between them: tests/e2e/test_bulk_crash.py).
    started = bulk(t, t.acme, body)
    assert started.status_code == 202, started.text
    op_id = started.json()["operation"]["id"]
    op = finished(t, t.acme, op_id)
    assert op["state"] == "done", op
    assert (op["total"], op["done"], op["skipped"], op["failed"]) == (7, 7, 0, 0)
    assert op["batches"] == 1
    assert op["caller"].startswith("api_key:")

    states = {j: job_row(sql, j)["state"] for j in [*mine, other_kind, blue, theirs, done]}
    assert {states[j] for j in mine} == {"cancelled"}
    assert (states[other_kind], states[blue], states[theirs], states[done]) == (
        "queued",
        "queued",
        "queued",
        "succeeded",
    )
    # Audited: each job's timeline names the operation; once per job.
    events = sql.execute(
        "SELECT job_id::text AS job_id, detail FROM job_events WHERE to_state = 'cancelled'"
    ).fetchall()
    assert sorted(e["job_id"] for e in events) == sorted(mine)
    assert {e["detail"] for e in events} == {f"cancel by bulk operation {op_id} ({op['caller']})"}

    # Another tenant does not see the operation; the admin does; the listing too.
    assert t.client.get(f"/v1/bulk/{op_id}", headers=bearer(t.globex)).status_code == 404
    assert t.client.get(f"/v1/bulk/{op_id}", headers=bearer(t.admin)).json()["id"] == op_id
    assert [o["id"] for o in t.client.get("/v1/bulk", headers=bearer(t.globex)).json()] == []
    assert op_id in [o["id"] for o in t.client.get("/v1/bulk", headers=bearer(t.acme)).json()]


def test_a_bulk_redrive_by_ids_requeues_the_dead_letters_and_skips_the_rest(
    tenants: Tenants,  # noqa: F811 (the fixture imported above)
    sql: Any,
) -> None:
    t = tenants
    dead = [dead_lettered_job(t, sql, t.acme) for _ in range(4)]
    queued = submit(t, t.acme)
    theirs = dead_lettered_job(t, sql, t.globex)
    body = {"action": "redrive", "filter": {"ids": [*dead, queued, theirs]}}

    dry = bulk(t, t.acme, {**body, "dry_run": True})
    assert dry.json()["total"] == 4  # the queued one is no dead letter; globex's not acme's

    op = finished(t, t.acme, bulk(t, t.acme, body).json()["operation"]["id"])
    assert (op["state"], op["done"], op["skipped"], op["failed"]) == ("done", 4, 0, 0)
    for job_id in dead:
        row = job_row(sql, job_id)
        assert (row["state"], row["redrives"], row["attempt"]) == ("queued", 1, 0)
    assert job_row(sql, theirs)["state"] == "dead_lettered"
    # Each redriven job got its outbox row, sent.
    unsent = sql.execute(
        "SELECT count(*) AS n FROM outbox WHERE job_id = ANY(%s::uuid[]) AND sent_at IS NULL",
        (dead,),
    ).fetchone()
    assert unsent["n"] == 0

    # The admin's bulk redrive of every dead letter reaches globex's too.
    op = finished(t, t.admin, bulk(t, t.admin, {"action": "redrive"}).json()["operation"]["id"])
    assert op["done"] == 1 and job_row(sql, theirs)["state"] == "queued"


def test_a_bulk_rerun_makes_one_new_job_per_finished_job_and_leaves_the_rest(
    tenants: Tenants,  # noqa: F811 (the fixture imported above)
    sql: Any,
) -> None:
    t = tenants
    dead = [dead_lettered_job(t, sql, t.acme) for _ in range(3)]
    done = submit(t, t.acme, noop({"n": 1}))
    sql.execute("UPDATE jobs SET state = 'succeeded', finished_at = now() WHERE id = %s", (done,))
    queued = submit(t, t.acme, noop({"n": 2}))
    theirs = dead_lettered_job(t, sql, t.globex)
    body = {"action": "rerun", "filter": {"ids": [*dead, done, queued, theirs]}}

    # The dry run counts the finished jobs of the caller's tenant only.
    assert bulk(t, t.acme, {**body, "dry_run": True}).json()["total"] == 4
    # An empty list of ids is refused, never read as "every job".
    none = bulk(t, t.acme, {"action": "rerun", "filter": {"ids": []}, "dry_run": True})
    assert none.status_code == 422 and "ids" in none.text
    refused = bulk(t, t.acme, {"action": "rerun", "filter": {"states": ["queued"]}})
    assert refused.status_code == 422 and "rerun acts on" in refused.text

    op = finished(t, t.acme, bulk(t, t.acme, body).json()["operation"]["id"])
    assert (op["state"], op["done"], op["skipped"], op["failed"]) == ("done", 4, 0, 0), op
    made = sql.execute(
        "SELECT rerun_of::text AS original, id::text AS id, state::text AS state, tenant, "
        "idempotency_key FROM jobs WHERE rerun_of IS NOT NULL"
    ).fetchall()
    # One re-run each, in the original's tenant, queued, keyed by the operation and job.
    assert sorted(m["original"] for m in made) == sorted([*dead, done])
    assert {(m["state"], m["tenant"]) for m in made} == {("queued", "acme")}
    assert {m["idempotency_key"] for m in made} == {f"bulk:{op['id']}:{j}" for j in [*dead, done]}
    # The originals stay as they were; the queued one and globex's are untouched.
    assert {job_row(sql, j)["state"] for j in dead} == {"dead_lettered"}
    assert job_row(sql, queued)["state"] == "queued"
    assert job_row(sql, theirs)["state"] == "dead_lettered"
