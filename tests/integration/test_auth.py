"""Who may do what, over HTTP in this process (FastAPI's TestClient) against the test's real
PostgreSQL and SQS server: every /v1 route needs a valid key, a revoked key stops at once,
another tenant's job is 404 and stays as it was, an admin key sees every tenant."""

from __future__ import annotations

import json
import uuid
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from app import errors, store
from app.api import create_app
from app.services import auth
from app.settings import config
from app.states import JobState
from tests import carrier
from tests.conftest import Stack, bearer, job_row, wait_for
from tests.helpers import count, engine_for, queue_depth, receive_records

with warnings.catch_warnings():
    # starlette >= 1.10 warns at import that it found httpx rather than httpx2 (see test_api.py).
    warnings.filterwarnings("ignore", message="Using `httpx` with `starlette.testclient`")
    from fastapi.testclient import TestClient

# What this module checks does not depend on the carrier: it runs on moto only.
pytestmark = [pytest.mark.integration, pytest.mark.carrier_neutral]

NOOP = {"kind": "demo.noop", "payload": {}}
CHALLENGE = 'Bearer realm="tasklease"'


@dataclass(frozen=True)
class Route:
    method: str
    path: str  # "{job}" stands for a job id
    body: dict[str, Any] | None
    # What the owning tenant's key gets when the job is dead-lettered, in this order.
    owner_status: int


# Every /v1 route (test_the_table_names_every_v1_route keeps it so). Redrive comes before
# cancel so that both succeed for the owner on one dead-lettered job.
ROUTES = [
    Route("POST", "/v1/jobs", NOOP, 202),
    Route("POST", "/v1/jobs/batch", {"jobs": [NOOP, NOOP]}, 202),
    Route("GET", "/v1/jobs", None, 200),
    Route("GET", "/v1/jobs/{job}", None, 200),
    Route("GET", "/v1/jobs/{job}/events", None, 200),
    Route("GET", "/v1/jobs/{job}/effects", None, 200),
    Route("GET", "/v1/jobs/{job}/callbacks", None, 200),
    # The job has no callback "{key}" (the owner's answer is 404, after the key and the job).
    Route("POST", "/v1/jobs/{job}/callbacks/{key}", {"result": 1}, 404),
    # A dead-lettered job takes messages (a redrive brings it back to read them).
    Route("POST", "/v1/jobs/{job}/messages", {"topic": "user", "body": "hi"}, 201),
    Route("GET", "/v1/jobs/{job}/messages", None, 200),
    Route("GET", "/v1/jobs/{job}/state", None, 200),
    # The job published no key "{key}" (the owner's answer is 404, naming it).
    Route("GET", "/v1/jobs/{job}/state/{key}", None, 404),
    # A finished job is re-run (a new job); it recorded no step "none" to fork from.
    Route("POST", "/v1/jobs/{job}/rerun", None, 202),
    Route("POST", "/v1/jobs/{job}/fork", {"step": "none"}, 404),
    Route("POST", "/v1/jobs/{job}/redrive", None, 202),
    Route("POST", "/v1/jobs/{job}/cancel", None, 200),
    Route("GET", "/v1/dead-letters", None, 200),
    Route("POST", "/v1/dead-letters/redrive", {}, 403),  # a tenant key is known, not allowed
    Route("GET", "/v1/me", None, 200),
    # "{schedule}": a schedule id nobody has (the owner's answer is 404, after the key).
    Route("POST", "/v1/schedules", {"cron": "0 9 * * *", **NOOP}, 201),
    Route("GET", "/v1/schedules", None, 200),
    Route("GET", "/v1/schedules/{schedule}", None, 404),
    Route("POST", "/v1/schedules/{schedule}/pause", None, 404),
    Route("POST", "/v1/schedules/{schedule}/resume", None, 404),
    Route("DELETE", "/v1/schedules/{schedule}", None, 404),
    Route("GET", "/v1/jobs/{job}/stream?after=0&wait=0", None, 200),
    Route("GET", "/v1/stream?after=0&wait=0", None, 200),
    Route("GET", "/v1/overview", None, 200),
    Route("GET", "/v1/usage", None, 200),
    Route("GET", "/v1/charts", None, 200),
    Route("GET", "/v1/kinds", None, 200),
    Route("GET", "/v1/workers", None, 403),  # workers serve every tenant: admin keys only
    # A dry run changes nothing; "{bulk}": an operation nobody has (404, after the key).
    Route("POST", "/v1/bulk", {"action": "cancel", "dry_run": True}, 202),
    Route("GET", "/v1/bulk", None, 200),
    Route("GET", "/v1/bulk/{bulk}", None, 404),
    Route("GET", "/v1/alerts", None, 200),
    # The tenants' alert webhooks are an admin's: a tenant key is known, not allowed.
    Route("GET", "/v1/alerts/webhooks", None, 403),
    Route("PUT", "/v1/alerts/webhooks/{tenant}", {"url": "https://hooks.example/a"}, 403),
    Route("DELETE", "/v1/alerts/webhooks/{tenant}", None, 403),
]
JOB_ROUTES = [r for r in ROUTES if "{job}" in r.path]
# The /v1 routes whose credential is a callback token in the path, not an API key
# (tests/integration/test_api_waits.py; the Terraform routes them past any authorizer).
NO_SCHEDULE = "00000000-0000-4000-8000-000000000000"
TOKEN_ROUTES = {("POST", "/v1/callbacks/{token}"), ("POST", "/v1/callbacks/{token}/heartbeat")}


def call(
    client: TestClient, route: Route, job_id: Any, headers: dict[str, str] | None = None
) -> Any:
    return client.request(
        route.method,
        route.path.format(
            job=job_id, schedule=NO_SCHEDULE, bulk=NO_SCHEDULE, key="approve", tenant="acme"
        ),
        json=route.body,
        headers=headers or {},
    )


# --- the stack: two tenants and an operator ---------------------------------------------


@dataclass
class Tenants:
    stack: Stack
    client: TestClient
    acme: str
    globex: str
    admin: str


@pytest.fixture
def tenants(stack: Stack) -> Iterator[Tenants]:
    keys = {
        "acme": stack.key("acme"),
        "globex": stack.key("globex"),
        "admin": stack.key("ops", admin=True),
    }
    # No default Authorization: each request says who it is. The key throttle (its own
    # tests: tests/integration/test_api_keys_hmac.py) must not answer 429 before a walk of
    # every route with one bad key is done.
    settings = stack.with_settings(auth_failure_limit="1000/minute")
    app = create_app(settings)
    # Sent rows marked before each answer (as on Lambda), not a moment later: the tests
    # here compare every table before and after a refused request (snapshot), and a
    # mark landing in between is not the request's doing. The deferred marks have
    # their own tests (test_api.py, tests/unit/test_send_records.py).
    app.state.runtime.record_sends_later = False
    with TestClient(app) as client:
        yield Tenants(stack=stack, client=client, **keys)


def submit(t: Tenants, key: str, body: dict[str, Any] = NOOP, **headers: str) -> str:
    resp = t.client.post("/v1/jobs", json=body, headers={**bearer(key), **headers})
    assert resp.status_code == 202, resp.text
    return str(resp.json()["id"])


def dead_lettered_job(t: Tenants, sql: Any, key: str) -> str:
    """A job of the key's tenant in the state every mutating route would change:
    cancel would cancel it, redrive would queue it."""
    job_id = submit(t, key)
    sql.execute(
        "UPDATE jobs SET state = 'dead_lettered', dead_lettered_by = 'engine', "
        "finished_at = now(), last_error = 'given' WHERE id = %s",
        (job_id,),
    )
    return job_id


# Everything a request could write. api_keys is here so that a refused request is seen
# to change no key either.
TABLES = {
    "jobs": "id",
    "outbox": "id",
    "job_events": "id",
    "effects": "job_id, key",
    "tenant_limits": "tenant",
    "api_keys": "id",
    "schedules": "id",
    "bulk_operations": "id",
    "tenant_alert_webhooks": "tenant",
}


def snapshot(sql: Any) -> dict[str, list[dict[str, Any]]]:
    return {
        table: sql.execute(f"SELECT * FROM {table} ORDER BY {order}").fetchall()
        for table, order in TABLES.items()
    }


async def revoke(stack: Stack, key_id: str) -> dict[str, Any]:
    assert stack.settings.database_url is not None
    async with store.connect(stack.settings.database_url, min_size=1, max_size=1) as database:
        return await auth.revoke_key(database, key_id)


def key_id(key: str) -> str:
    return auth.split_key(key)[0]


# --- the table ------------------------------------------------------------------------


def test_the_table_names_every_v1_route() -> None:
    """A new /v1 route must join ROUTES, and so every test below that walks it."""
    # Nothing is opened before the first request: no servers needed to list the routes.
    app = create_app(
        config.load(database_url="postgresql://unused/x", queue_url="http://q", dlq_url="http://d")
    )
    # From the document: FastAPI keeps an included APIRouter's routes out of app.routes.
    served = {
        (method.upper(), path)
        for path, operations in app.openapi()["paths"].items()
        if path.startswith("/v1")
        for method in operations
    }
    table = {
        (
            r.method,
            r.path.split("?")[0]
            .replace("{job}", "{job_id}")
            .replace("{schedule}", "{schedule_id}")
            .replace("{bulk}", "{bulk_id}"),
        )
        for r in ROUTES
    }
    assert served == table | TOKEN_ROUTES


def test_the_document_names_the_bearer_scheme_on_every_route_that_needs_a_key() -> None:
    """The submit routes check the key without FastAPI's HTTPBearer dependency (the hot
    path) and name its scheme by hand: the document must say so as for any other route."""
    app = create_app(
        config.load(database_url="postgresql://unused/x", queue_url="http://q", dlq_url="http://d")
    )
    document = app.openapi()
    schemes = document["components"]["securitySchemes"]
    assert schemes["HTTPBearer"]["scheme"] == "bearer"
    secured = {
        (method.upper(), path): operation.get("security")
        for path, operations in document["paths"].items()
        if path.startswith("/v1")
        for method, operation in operations.items()
    }
    for route, security in secured.items():
        if route in TOKEN_ROUTES:
            assert not security, route
        else:
            assert security == [{"HTTPBearer": []}], route
    assert ("POST", "/v1/jobs") in secured and ("POST", "/v1/jobs/batch") in secured


def test_the_token_routes_need_no_key_and_ignore_a_bad_one(tenants: Tenants, sql: Any) -> None:
    """An unknown token is 404 whatever the Authorization header says: no key is asked for,
    and a bad key is not what is wrong."""
    before = snapshot(sql)
    for method, path in TOKEN_ROUTES:
        for headers in ({}, bearer(wrong_secret(tenants.acme))):
            resp = tenants.client.request(
                method, path.format(token="tlcb_unknown"), json={"result": 1}, headers=headers
            )
            assert resp.status_code == 404, (path, resp.text)
            assert "WWW-Authenticate" not in resp.headers
    assert snapshot(sql) == before


# --- no valid key -----------------------------------------------------------------------


def wrong_secret(key: str) -> str:
    kid, secret = auth.split_key(key)
    return f"tlk_{kid}_{'A' * len(secret)}"


# RFC 6750 §3.1: no error code when no credentials came; invalid_request for a header
# that is not "Bearer <token>"; invalid_token for a token that is not a valid key.
NO_VALID_KEY = {
    "no Authorization header": CHALLENGE,
    "another scheme": CHALLENGE + ', error="invalid_request"',
    "Bearer with no token": CHALLENGE + ', error="invalid_request"',
    "a token not shaped like a key": CHALLENGE + ', error="invalid_token"',
    "a real key id with a wrong secret": CHALLENGE + ', error="invalid_token"',
    "a well-formed key that does not exist": CHALLENGE + ', error="invalid_token"',
    "an admin key id with a wrong secret": CHALLENGE + ', error="invalid_token"',
}


@pytest.mark.parametrize("case", NO_VALID_KEY)
def test_every_v1_route_without_a_valid_key_is_401_and_changes_nothing(
    tenants: Tenants, sql: Any, case: str
) -> None:
    challenge = NO_VALID_KEY[case]
    # Given: a dead-lettered job of acme's, which cancel or redrive would change.
    job_id = dead_lettered_job(tenants, sql, tenants.acme)
    headers = {
        "no Authorization header": {},
        "another scheme": {"Authorization": "Basic YWNtZTpodW50ZXIy"},
        "Bearer with no token": {"Authorization": "Bearer "},
        "a token not shaped like a key": bearer("tlk_not-a-key"),
        "a real key id with a wrong secret": bearer(wrong_secret(tenants.acme)),
        "a well-formed key that does not exist": bearer(f"tlk_{'0' * 12}_{'s' * 43}"),
        "an admin key id with a wrong secret": bearer(wrong_secret(tenants.admin)),
    }[case]
    before = snapshot(sql)
    jobs, outbox, depth = count(sql, "jobs"), count(sql, "outbox"), queue_depth(tenants.stack)

    for route in ROUTES:
        resp = call(tenants.client, route, job_id, headers)

        assert resp.status_code == 401, (route, resp.text)
        assert resp.headers["WWW-Authenticate"] == challenge, route
        assert set(resp.json()) == {"detail"}
        assert auth.split_key(tenants.acme)[1] not in resp.text

    # An anonymous caller does not learn what is wrong with its body either.
    bad_body = tenants.client.post("/v1/jobs", json={"kind": "no.such.kind"}, headers=headers)
    assert bad_body.status_code == 401

    # Then: nothing was written or sent.
    assert count(sql, "jobs") == jobs
    assert count(sql, "outbox") == outbox
    assert snapshot(sql) == before
    assert job_row(sql, job_id)["state"] == JobState.DEAD_LETTERED
    assert queue_depth(tenants.stack) == depth


@pytest.mark.asyncio
async def test_a_revoked_key_is_refused_at_once_though_this_process_verified_it_before(
    tenants: Tenants, sql: Any
) -> None:
    # Given: acme's key works on every route, so this process has verified it.
    job_id = dead_lettered_job(tenants, sql, tenants.acme)
    for route in ROUTES:
        resp = call(tenants.client, route, job_id, bearer(tenants.acme))
        assert resp.status_code == route.owner_status, (route, resp.text)
    verifier = tenants.client.app.state.runtime.keys  # type: ignore[attr-defined]
    assert key_id(tenants.acme) in verifier._verified  # the verified-secret cache holds it
    second_acme_key = tenants.stack.key("acme", name="second")
    probe = dead_lettered_job(tenants, sql, second_acme_key)

    # When: it is revoked (by another connection, as `tasklease keys revoke` does).
    revoked = await revoke(tenants.stack, key_id(tenants.acme))
    assert revoked["revoked_at"] is not None
    before = snapshot(sql)

    # Then: the very next request with it is 401 on every route, and changes nothing.
    for route in ROUTES:
        resp = call(tenants.client, route, probe, bearer(tenants.acme))
        assert resp.status_code == 401, (route, resp.text)
        assert resp.headers["WWW-Authenticate"] == CHALLENGE + ', error="invalid_token"'
        # A revoked key gets the same answer as an unknown one.
        assert resp.json() == {"detail": "the API key is not valid"}
    assert snapshot(sql) == before
    assert job_row(sql, probe)["state"] == JobState.DEAD_LETTERED

    # The tenant's other key still works: revocation is per key.
    me = tenants.client.get("/v1/me", headers=bearer(second_acme_key))
    assert me.status_code == 200
    assert me.json()["key_id"] == key_id(second_acme_key)


# What a submission may carry once its key is revoked: each must be 401 and write
# nothing. The submit routes verify a key this process knows from memory and leave its
# revocation to the insert (one round trip fewer); these are the requests that fail
# before, or instead of, that insert.
REVOKED_SUBMISSIONS = {
    "a good job": ("/v1/jobs", NOOP, {}),
    "a good batch": ("/v1/jobs/batch", {"jobs": [NOOP, NOOP]}, {}),
    "a replay of an earlier Idempotency-Key": ("/v1/jobs", NOOP, {"Idempotency-Key": "k-1"}),
    "a replay inside a batch": (
        "/v1/jobs/batch",
        {"jobs": [{**NOOP, "idempotency_key": "k-2"}]},
        {},
    ),
    "an unknown kind (refused by the service)": ("/v1/jobs", {"kind": "no.such.kind"}, {}),
    "a body that does not validate (refused by FastAPI)": (
        "/v1/jobs",
        {"kind": "demo.noop", "max_attempts": "many"},
        {},
    ),
    "a batch with a bad job": ("/v1/jobs/batch", {"jobs": [NOOP, {"kind": 3}]}, {}),
}


@pytest.mark.parametrize("case", REVOKED_SUBMISSIONS)
@pytest.mark.asyncio
async def test_a_revoked_key_submits_nothing_though_its_check_rides_on_the_insert(
    tenants: Tenants, sql: Any, case: str
) -> None:
    path, body, headers = REVOKED_SUBMISSIONS[case]
    # Given: acme's key has submitted (so this process holds it verified), two of the
    # submissions with an Idempotency-Key that a replay would answer with.
    first = submit(tenants, tenants.acme, **{"Idempotency-Key": "k-1"})
    batch = tenants.client.post(
        "/v1/jobs/batch",
        json={"jobs": [{**NOOP, "idempotency_key": "k-2"}]},
        headers=bearer(tenants.acme),
    )
    assert batch.status_code == 202, batch.text
    verifier = tenants.client.app.state.runtime.keys  # type: ignore[attr-defined]
    assert key_id(tenants.acme) in verifier._verified

    # When: the key is revoked by another connection, and the request comes.
    await revoke(tenants.stack, key_id(tenants.acme))
    before, depth = snapshot(sql), queue_depth(tenants.stack)
    resp = tenants.client.post(path, json=body, headers={**bearer(tenants.acme), **headers})

    # Then: 401 like any key that is not valid, no job (not even the replayed one's id)
    # in the answer, and nothing written or sent.
    assert resp.status_code == 401, resp.text
    assert resp.headers["WWW-Authenticate"] == CHALLENGE + ', error="invalid_token"'
    assert resp.json() == {"detail": "the API key is not valid"}
    assert first not in resp.text
    assert snapshot(sql) == before
    assert queue_depth(tenants.stack) == depth


def test_a_known_key_submits_without_reading_its_row_first(tenants: Tenants) -> None:
    """The round trip the insert saves: a key this process verified is not looked up on
    its own again by a submission (every other route still reads it)."""
    submit(tenants, tenants.acme)  # verified now
    verifier = tenants.client.app.state.runtime.keys  # type: ignore[attr-defined]
    looked_up: list[str] = []
    fetch_one = verifier.db.fetch_one

    async def counting(query: Any, params: Any = None) -> Any:
        if params and set(params) == {"id"}:
            looked_up.append(params["id"])
        return await fetch_one(query, params)

    verifier.db.fetch_one = counting
    try:
        submit(tenants, tenants.acme)
        assert looked_up == []
        me = tenants.client.get("/v1/me", headers=bearer(tenants.acme))
        assert me.status_code == 200
        assert looked_up == [key_id(tenants.acme)]
    finally:
        verifier.db.fetch_one = fetch_one


@pytest.mark.asyncio
async def test_revoking_twice_keeps_the_first_time_and_an_unknown_id_is_not_found(
    tenants: Tenants,
) -> None:
    first = await revoke(tenants.stack, key_id(tenants.globex))
    second = await revoke(tenants.stack, key_id(tenants.globex))
    assert second["revoked_at"] == first["revoked_at"]
    with pytest.raises(errors.NotFound):
        await revoke(tenants.stack, "0" * 12)
    with pytest.raises(errors.BadRequest):
        await revoke(tenants.stack, "not-an-id")
    assert tenants.client.get("/v1/me", headers=bearer(tenants.globex)).status_code == 401


# --- another tenant's job ---------------------------------------------------------------


def test_another_tenants_job_is_404_on_every_job_route_and_stays_as_it_was(
    tenants: Tenants, sql: Any
) -> None:
    job_id = dead_lettered_job(tenants, sql, tenants.acme)
    missing = uuid.uuid4()
    before = snapshot(sql)

    for route in JOB_ROUTES:
        theirs = call(tenants.client, route, job_id, bearer(tenants.globex))
        nobodys = call(tenants.client, route, missing, bearer(tenants.globex))

        assert theirs.status_code == 404, (route, theirs.text)  # never 403
        # The same answer as for a job that does not exist: no id is confirmed.
        assert theirs.json() == {"detail": f"no job {job_id}"}
        assert nobodys.json() == {"detail": f"no job {missing}"}

    assert snapshot(sql) == before
    listed = tenants.client.get("/v1/jobs", headers=bearer(tenants.globex)).json()
    assert listed == {"items": [], "next_cursor": None}
    assert tenants.client.get("/v1/dead-letters", headers=bearer(tenants.globex)).json() == []

    # The owner's same requests do change it (the refusals above were not a no-op anyway).
    cancel = tenants.client.post(f"/v1/jobs/{job_id}/cancel", headers=bearer(tenants.acme))
    assert cancel.status_code == 200
    assert job_row(sql, job_id)["state"] == JobState.CANCELLED


# --- scoping -----------------------------------------------------------------------------


def test_a_tenant_lists_only_its_own_jobs_and_an_admin_reads_every_tenant(
    tenants: Tenants,
) -> None:
    acme = [submit(tenants, tenants.acme) for _ in range(3)]
    globex = [submit(tenants, tenants.globex)]

    def walk(key: str) -> list[str]:
        """Every page, following the cursor."""
        seen: list[str] = []
        cursor: str | None = None
        while True:
            params: dict[str, Any] = {"limit": 2, **({"cursor": cursor} if cursor else {})}
            page = tenants.client.get("/v1/jobs", params=params, headers=bearer(key)).json()
            seen += [j["id"] for j in page["items"]]
            cursor = page["next_cursor"]
            if cursor is None:
                return seen

    assert walk(tenants.acme) == list(reversed(acme))
    assert walk(tenants.globex) == globex
    assert sorted(walk(tenants.admin)) == sorted(acme + globex)

    for job_id in acme + globex:
        for path in ("/v1/jobs/{}", "/v1/jobs/{}/events", "/v1/jobs/{}/effects"):
            resp = tenants.client.get(path.format(job_id), headers=bearer(tenants.admin))
            assert resp.status_code == 200, (path, resp.text)
    hidden = tenants.client.get(f"/v1/jobs/{globex[0]}", headers=bearer(tenants.acme))
    assert hidden.status_code == 404

    me = {
        who: tenants.client.get("/v1/me", headers=bearer(key)).json()
        for who, key in (("acme", tenants.acme), ("admin", tenants.admin))
    }
    assert me["acme"] == {
        "tenant": "acme",
        "admin": False,
        "key_id": key_id(tenants.acme),
        "via": "api_key",
    }
    assert me["admin"] == {
        "tenant": "ops",
        "admin": True,
        "key_id": key_id(tenants.admin),
        "via": "api_key",
    }


def test_an_admin_may_cancel_any_tenants_job_and_the_job_keeps_its_tenant(
    tenants: Tenants, sql: Any
) -> None:
    job_id = submit(tenants, tenants.globex)
    resp = tenants.client.post(f"/v1/jobs/{job_id}/cancel", headers=bearer(tenants.admin))
    assert resp.status_code == 200
    row = job_row(sql, job_id)
    assert (row["state"], row["tenant"]) == (JobState.CANCELLED, "globex")


def test_idempotency_keys_are_per_tenant(tenants: Tenants, sql: Any) -> None:
    headers = {"Idempotency-Key": "order-7"}
    acme = tenants.client.post("/v1/jobs", json=NOOP, headers={**bearer(tenants.acme), **headers})
    # The same key from another tenant, even with another body, is another job, not a 409.
    other_body = {"kind": "demo.noop", "payload": {"x": 1}}
    globex = tenants.client.post(
        "/v1/jobs", json=other_body, headers={**bearer(tenants.globex), **headers}
    )
    same_body = tenants.client.post(
        "/v1/jobs", json=NOOP, headers={**bearer(tenants.admin), **headers}
    )

    assert acme.status_code == globex.status_code == same_body.status_code == 202
    ids = {acme.json()["id"], globex.json()["id"], same_body.json()["id"]}
    assert len(ids) == 3
    for resp in (acme, globex, same_body):
        assert "Idempotent-Replayed" not in resp.headers
    rows = sql.execute("SELECT tenant, idempotency_key FROM jobs ORDER BY tenant").fetchall()
    assert [(r["tenant"], r["idempotency_key"]) for r in rows] == [
        ("acme", "order-7"),
        ("globex", "order-7"),
        ("ops", "order-7"),
    ]

    # Each tenant's replay finds its own job.
    replay = tenants.client.post(
        "/v1/jobs", json=other_body, headers={**bearer(tenants.globex), **headers}
    )
    assert replay.status_code == 202
    assert replay.json()["id"] == globex.json()["id"]
    assert replay.headers["Idempotent-Replayed"] == "true"
    conflict = tenants.client.post(
        "/v1/jobs", json=other_body, headers={**bearer(tenants.acme), **headers}
    )
    assert conflict.status_code == 409
    assert count(sql, "jobs") == 3
    assert count(sql, "outbox") == 3


# --- dead letters -------------------------------------------------------------------------

PERMANENT = {"kind": "demo.flaky", "payload": {"permanent": True}}


async def run_until_dead_lettered(stack: Stack, sql: Any, job_ids: list[str]) -> None:
    """The in-process engine takes messages until every job is dead-lettered."""

    def all_dead() -> bool:
        return all(job_row(sql, j)["state"] == JobState.DEAD_LETTERED for j in job_ids)

    async with engine_for(stack.settings) as engine:
        for _ in range(10):
            if all_dead():
                break
            records = await receive_records(engine, wait=1)
            if records:
                await engine.handle({"Records": records}, None)
    assert all_dead(), [job_row(sql, j)["state"] for j in job_ids]


@pytest.mark.asyncio
async def test_dead_letters_are_scoped_to_the_tenant_and_bulk_redrive_needs_an_admin_key(
    tenants: Tenants, sql: Any
) -> None:
    # Given: one permanent failure each for acme and globex, dead-lettered by the engine.
    acme_job = submit(tenants, tenants.acme, PERMANENT)
    globex_job = submit(tenants, tenants.globex, PERMANENT)
    await run_until_dead_lettered(tenants.stack, sql, [acme_job, globex_job])

    def dead(key: str, **params: str) -> Any:
        return tenants.client.get("/v1/dead-letters", params=params, headers=bearer(key))

    # A tenant sees its own dead letters only, may name its own tenant (as on every route
    # that takes ?tenant=: tests/integration/test_tenant_filter.py), and not another.
    assert [j["id"] for j in dead(tenants.acme).json()] == [acme_job]
    assert [j["id"] for j in dead(tenants.globex).json()] == [globex_job]
    assert [j["id"] for j in dead(tenants.acme, tenant="acme").json()] == [acme_job]
    refused = dead(tenants.acme, tenant="globex")
    assert refused.status_code == 403
    assert "its own tenant" in refused.json()["detail"]
    # An admin sees every tenant's, or one tenant's with the filter.
    assert sorted(j["id"] for j in dead(tenants.admin).json()) == sorted([acme_job, globex_job])
    assert [j["id"] for j in dead(tenants.admin, tenant="globex").json()] == [globex_job]
    assert dead(tenants.admin, tenant="initech").json() == []

    # Bulk redrive: 403 for a tenant key, and nothing moves.
    before = snapshot(sql)
    for key in (tenants.acme, tenants.globex):
        refused = tenants.client.post(
            "/v1/dead-letters/redrive", json={"tenant": "globex"}, headers=bearer(key)
        )
        assert refused.status_code == 403
    assert snapshot(sql) == before

    # The admin redrives globex's only: its dead letter moves back, acme's stays.
    resp = tenants.client.post(
        "/v1/dead-letters/redrive", json={"tenant": "globex"}, headers=bearer(tenants.admin)
    )
    assert resp.status_code == 200, resp.text
    summary = resp.json()
    assert (summary["selected"], summary["moved"], summary["reset"]) == (1, 1, 1)
    assert job_row(sql, globex_job)["state"] == JobState.QUEUED
    assert job_row(sql, acme_job)["state"] == JobState.DEAD_LETTERED
    moved = wait_for(
        lambda: carrier.receive_raw(tenants.stack),
        timeout=10,
        what="the redriven message on the source queue",
    )
    assert [json.loads(m["Body"]) for m in moved] == [{"job_id": globex_job, "v": 1}]

    # One job's redrive is the owner's (or an admin's) alone.
    theirs = tenants.client.post(f"/v1/jobs/{acme_job}/redrive", headers=bearer(tenants.globex))
    assert theirs.status_code == 404
    assert job_row(sql, acme_job)["state"] == JobState.DEAD_LETTERED
    mine = tenants.client.post(f"/v1/jobs/{acme_job}/redrive", headers=bearer(tenants.acme))
    assert mine.status_code == 202
    assert job_row(sql, acme_job)["state"] == JobState.QUEUED


@pytest.mark.asyncio
async def test_alerts_are_scoped_to_the_tenant_and_their_webhooks_need_an_admin_key(
    tenants: Tenants, sql: Any
) -> None:
    # Given: one dead letter each for acme and globex: each wrote its alert.
    acme_job = submit(tenants, tenants.acme, PERMANENT)
    globex_job = submit(tenants, tenants.globex, PERMANENT)
    await run_until_dead_lettered(tenants.stack, sql, [acme_job, globex_job])

    def listed(key: str, **params: str) -> Any:
        return tenants.client.get("/v1/alerts", params=params, headers=bearer(key))

    assert [a["job_id"] for a in listed(tenants.acme).json()] == [acme_job]
    assert [a["job_id"] for a in listed(tenants.globex).json()] == [globex_job]
    assert listed(tenants.acme, tenant="globex").status_code == 403
    every = listed(tenants.admin).json()
    assert sorted(a["job_id"] for a in every) == sorted([acme_job, globex_job])
    assert {a["type"] for a in every} == {"job.dead_lettered"}
    assert [a["job_id"] for a in listed(tenants.admin, tenant="globex").json()] == [globex_job]
    bad = listed(tenants.admin, type="job.exploded")
    assert bad.status_code == 422 and "not an alert type" in bad.json()["detail"]
    # What the deployment's destinations did (their errors may name their URLs) is the
    # operators': a tenant key sees only its own webhook's deliveries and errors.
    sql.execute(
        "UPDATE alerts SET delivered = ARRAY['eventbridge', 'tenant_webhook'], last_error ="
        " 'webhook: ConnectError: https://hooks.example/secret-path; tenant_webhook: HTTP 500'"
    )
    [own] = listed(tenants.acme).json()
    assert (own["delivered"], own["last_error"]) == (["tenant_webhook"], "tenant_webhook: HTTP 500")
    assert "secret-path" not in json.dumps(listed(tenants.globex).json())
    assert all("secret-path" in a["last_error"] for a in listed(tenants.admin).json())
    for alert in listed(tenants.admin).json():
        assert alert["delivered"] == ["eventbridge", "tenant_webhook"]

    # The webhooks: a tenant key may not set one, not even its own tenant's.
    hooks = "/v1/alerts/webhooks"
    before = snapshot(sql)
    for key in (tenants.acme, tenants.globex):
        mine = tenants.client.put(
            f"{hooks}/acme", json={"url": "https://x.example/h"}, headers=bearer(key)
        )
        assert mine.status_code == 403
    assert snapshot(sql) == before
    # An admin sets one (a secret made and shown once), lists it (no secret), clears it.
    made = tenants.client.put(
        f"{hooks}/acme", json={"url": "https://x.example/h"}, headers=bearer(tenants.admin)
    )
    assert made.status_code == 200, made.text
    assert made.json()["secret"].startswith("whsec_")
    [row] = tenants.client.get(hooks, headers=bearer(tenants.admin)).json()
    assert (row["tenant"], row["url"]) == ("acme", "https://x.example/h")
    assert "secret" not in row
    refused = tenants.client.put(
        f"{hooks}/acme", json={"url": "gopher://x"}, headers=bearer(tenants.admin)
    )
    assert refused.status_code == 422 and "http://" in refused.json()["detail"]
    unstorable = tenants.client.put(
        f"{hooks}/acme", json={"url": "https://x.example/\x00"}, headers=bearer(tenants.admin)
    )
    assert unstorable.status_code == 422 and "url" in unstorable.json()["detail"]
    assert tenants.client.get(hooks, headers=bearer(tenants.admin)).json()[0]["url"] == (
        "https://x.example/h"
    )
    gone = tenants.client.delete(f"{hooks}/acme", headers=bearer(tenants.admin))
    assert gone.status_code == 204
    again = tenants.client.delete(f"{hooks}/acme", headers=bearer(tenants.admin))
    assert again.status_code == 404 and "no alert webhook" in again.json()["detail"]
