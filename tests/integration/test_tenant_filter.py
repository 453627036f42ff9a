"""``?tenant=`` on every route that takes it (issue 30, item 13): a tenant key may name
its own tenant (200, the same answer as without the filter), another tenant is 403, and
an admin key may name any. Before, GET /v1/dead-letters?tenant=<own> was 403 while
GET /v1/jobs?tenant=<own> was 200. The routes are read from the OpenAPI document, so a
new route that takes ``tenant`` is checked too."""

from __future__ import annotations

from typing import Any

import pytest

from app.api import create_app
from app.settings import config
from tests.conftest import bearer, past_stream_horizon
from tests.integration.test_auth import (  # noqa: F401 (the fixture)
    Tenants,
    dead_lettered_job,
    tenants,
)

pytestmark = [pytest.mark.integration, pytest.mark.carrier_neutral]

# Each route that takes ?tenant=, with what else its request needs.
TENANT_ROUTES = {
    "/v1/jobs": "",
    "/v1/dead-letters": "",
    "/v1/schedules": "",
    "/v1/stream": "after=0&wait=0",
    "/v1/overview": "",
    "/v1/usage": "",
    # A week's buckets are hours: two calls a moment apart answer the same window.
    "/v1/charts": "window=week",
    "/v1/kinds": "",
    "/v1/alerts": "",
}


def test_the_table_names_every_route_that_takes_a_tenant() -> None:
    app = create_app(
        config.load(database_url="postgresql://unused/x", queue_url="http://q", dlq_url="http://d")
    )
    taking = {
        path
        for path, operations in app.openapi()["paths"].items()
        for operation in operations.values()
        for p in operation.get("parameters", [])
        if p["in"] == "query" and p["name"] == "tenant"
    }
    assert taking == set(TENANT_ROUTES)


def same_answer(path: str, a: Any, b: Any) -> bool:
    """The two answers agree. A stream page's ``next``, when it has no events, is the
    stream's horizon: the oldest transaction still running anywhere on the server, which
    another test's transaction (or a stream hub's own write, migration 0031) moves
    between two calls; which rows the page holds is what the filter decides."""
    if path == "/v1/stream":
        return bool(a["events"] == b["events"] and a["done"] == b["done"])
    return bool(a == b)


@pytest.mark.parametrize("path", sorted(TENANT_ROUTES))
def test_a_tenant_key_may_name_its_own_tenant_not_another_and_an_admin_any(
    tenants: Tenants,  # noqa: F811 (the fixture imported above)
    sql: Any,
    path: str,
) -> None:
    t = tenants
    for key in (t.acme, t.globex):
        dead_lettered_job(t, sql, key)
    past_stream_horizon(sql)

    def get(key: str, tenant: str | None = None) -> Any:
        query = "&".join(q for q in (TENANT_ROUTES[path], tenant and f"tenant={tenant}") if q)
        return t.client.get(f"{path}?{query}", headers=bearer(key))

    unfiltered = get(t.acme)
    own = get(t.acme, "acme")
    assert unfiltered.status_code == 200, unfiltered.text
    assert own.status_code == 200, own.text
    assert same_answer(path, own.json(), unfiltered.json())

    other = get(t.acme, "globex")
    assert other.status_code == 403, other.text
    assert "its own tenant" in other.json()["detail"]

    for tenant in ("acme", "globex"):
        assert get(t.admin, tenant).status_code == 200, (tenant, get(t.admin, tenant).text)


def test_the_tenant_filter_lists_that_tenant_s_dead_letters(
    tenants: Tenants,  # noqa: F811
    sql: Any,
) -> None:
    t = tenants
    mine, theirs = dead_lettered_job(t, sql, t.acme), dead_lettered_job(t, sql, t.globex)
    own = t.client.get("/v1/dead-letters?tenant=acme", headers=bearer(t.acme))
    assert [j["id"] for j in own.json()] == [mine], own.text
    admin = t.client.get("/v1/dead-letters?tenant=globex", headers=bearer(t.admin))
    assert [j["id"] for j in admin.json()] == [theirs], admin.text
