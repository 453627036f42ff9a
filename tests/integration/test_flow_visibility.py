"""Flow control by key, made visible (issue 35): GET /v1/jobs?key= finds a key's jobs (a
kind's key from the payload, or one a submission gave), scoped to the caller's tenant; a
bulk action takes the same filter; GET /v1/kinds shows each kind's limits per key; a
batch says which of its jobs were answered by their key's active job. Over HTTP in this
process, against the test's real PostgreSQL and SQS server."""

from __future__ import annotations

from typing import Any

import pytest

from tests.conftest import bearer
from tests.integration.test_auth import (  # noqa: F401 (the fixture)
    Tenants,
    submit,
    tenants,
)
from tests.integration.test_search_bulk import finished

pytestmark = [pytest.mark.integration, pytest.mark.carrier_neutral]


def converse(conversation: str, **extra: Any) -> dict[str, Any]:
    # Run an hour from now: the job stays active (waiting on its timer) for the test.
    return {
        "kind": "demo.converse",
        "payload": {"conversation": conversation, "text": "hi"},
        "delay_seconds": 3600,
        **extra,
    }


def found(t: Tenants, api_key: str, **params: Any) -> dict[str, dict[str, Any]]:
    resp = t.client.get("/v1/jobs", params=params, headers=bearer(api_key))
    assert resp.status_code == 200, resp.text
    return {j["id"]: j for j in resp.json()["items"]}


def test_a_key_finds_its_jobs_of_the_tenant_and_a_bulk_action_takes_it(
    tenants: Tenants,  # noqa: F811 (the fixture imported above)
) -> None:
    t = tenants
    c1 = [submit(t, t.acme, converse("c-1")) for _ in range(2)]
    c2 = submit(t, t.acme, converse("c-2"))
    given = submit(t, t.acme, {"kind": "demo.noop", "payload": {}, "key": "c-1"})
    plain = submit(t, t.acme, {"kind": "demo.noop", "payload": {}})
    theirs = submit(t, t.globex, converse("c-1"))

    mine = found(t, t.acme, key="c-1")
    assert set(mine) == {*c1, given}, "the key's jobs of any kind, the tenant's only"
    assert {j["key"] for j in mine.values()} == {"c-1"}
    assert set(found(t, t.acme, key="c-1", kind="demo.converse")) == set(c1)
    assert set(found(t, t.acme, key="c-2")) == {c2}
    assert found(t, t.acme, key="c-3") == {}
    assert set(found(t, t.admin, key="c-1")) == {*c1, given, theirs}
    assert set(found(t, t.admin, key="c-1", tenant="globex")) == {theirs}
    assert found(t, t.acme, kind="demo.noop", key="c-1").keys() == {given}
    assert found(t, t.acme, id=plain)[plain]["key"] is None

    # A bulk action's filter is the same: its dry run counts the key's jobs, a cancel
    # cancels them and nothing else.
    dry = t.client.post(
        "/v1/bulk",
        json={"action": "cancel", "filter": {"key": "c-1"}, "dry_run": True},
        headers=bearer(t.acme),
    )
    assert dry.status_code == 202, dry.text
    assert dry.json()["total"] == 3
    started = t.client.post(
        "/v1/bulk", json={"action": "cancel", "filter": {"key": "c-1"}}, headers=bearer(t.acme)
    )
    assert started.status_code == 202, started.text
    op = finished(t, t.acme, started.json()["operation"]["id"])
    assert (op["state"], op["done"]) == ("done", 3), op
    states = {i: j["state"] for i, j in found(t, t.admin, limit=50).items()}
    assert {states[i] for i in (*c1, given)} == {"cancelled"}
    assert states[c2] == "waiting" and states[theirs] == "waiting"
    assert states[plain] == "queued"

    # A key too long is refused naming it.
    bad = t.client.get("/v1/jobs", params={"key": "k" * 201}, headers=bearer(t.acme))
    assert bad.status_code == 422 and "key" in bad.text, bad.text
    refused = t.client.post(
        "/v1/bulk",
        json={"action": "cancel", "filter": {"key": ""}, "dry_run": True},
        headers=bearer(t.acme),
    )
    assert refused.status_code == 422 and "key" in refused.text, refused.text


def test_the_kinds_show_their_flow_control_and_a_batch_its_dropped_jobs(
    tenants: Tenants,  # noqa: F811 (the fixture imported above)
) -> None:
    t = tenants
    resp = t.client.get("/v1/kinds", headers=bearer(t.acme))
    assert resp.status_code == 200, resp.text
    flow = {k["name"]: k["flow"] for k in resp.json()["kinds"]}
    assert flow["demo.converse"] == {
        "keyed": True,
        "concurrency": 1,
        "if_active": "enqueue",
        "debounce_seconds": None,
        "rate": None,
    }
    assert flow["demo.reindex"]["debounce_seconds"] == 2.0
    assert flow["demo.reindex"]["concurrency"] is None
    assert flow["demo.sync"]["rate"] == {"limit": 2, "per_seconds": 1.0}
    assert flow["demo.noop"] == {
        "keyed": False,
        "concurrency": None,
        "if_active": "enqueue",
        "debounce_seconds": None,
        "rate": None,
    }

    active = submit(t, t.acme, converse("c-9"))
    batch = t.client.post(
        "/v1/jobs/batch",
        json={
            "jobs": [
                converse("c-9", if_active="drop_new"),
                {"kind": "demo.noop", "payload": {}},
            ]
        },
        headers=bearer(t.acme),
    )
    assert batch.status_code == 202, batch.text
    body = batch.json()
    assert body["dropped"] == [0] and body["replayed"] == []
    assert body["jobs"][0]["id"] == active and body["jobs"][0]["key"] == "c-9"
    assert body["jobs"][1]["id"] != active
