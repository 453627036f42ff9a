"""A bad request is 422 on every route, GET /v1/jobs included: a query that does not
validate and a value only the service can judge (a cursor this API did not return) get
the same answer, as on the other routes (issue 12). Until then a bad cursor was 400."""

from __future__ import annotations

import base64
from typing import Any

import pytest

from tests.conftest import bearer

# What this module checks does not depend on the carrier: it runs on moto only.
pytestmark = [pytest.mark.integration, pytest.mark.carrier_neutral]

BAD_LISTINGS = [
    pytest.param({"cursor": "not-ours"}, "cursor", id="cursor"),
    pytest.param(
        {"cursor": base64.urlsafe_b64encode(b"yesterday|not-a-uuid").decode()},
        "cursor",
        id="cursor-that-decodes",
    ),
    pytest.param({"state": "sleeping"}, "query.state", id="state"),
    pytest.param({"limit": 0}, "query.limit", id="limit-low"),
    pytest.param({"limit": 201}, "query.limit", id="limit-high"),
    pytest.param({"limit": "many"}, "query.limit", id="limit-not-a-number"),
    pytest.param({"kind": "nul\x00"}, "query.kind", id="kind-unstorable"),
]


@pytest.mark.parametrize(("params", "named"), BAD_LISTINGS)
def test_a_bad_listing_is_422_like_every_other_bad_request(
    api_with: Any, params: dict[str, Any], named: str
) -> None:
    api = api_with()
    key = bearer(api.stack.key("acme"))
    elsewhere = api.client.get("/v1/dead-letters", params={"limit": 0}, headers=key)
    assert elsewhere.status_code == 422

    resp = api.client.get("/v1/jobs", params=params, headers=key)

    assert resp.status_code == elsewhere.status_code, resp.text
    detail = resp.json()["detail"]
    assert isinstance(detail, str)
    assert named in detail, detail


def test_the_document_lists_the_listings_400_for_credentials_not_its_parameters(
    api_with: Any,
) -> None:
    """GET has no body to be unparseable and a bad parameter is 422: its one 400 is for
    ambiguous credentials (issue 13 item 11: more than one Authorization header)."""
    document = api_with().client.app.openapi()
    listing = document["paths"]["/v1/jobs"]["get"]["responses"]
    assert "Authorization" in listing["400"]["description"]
    assert listing["422"]["content"]["application/json"]["schema"] == {
        "$ref": "#/components/schemas/Problem"
    }
