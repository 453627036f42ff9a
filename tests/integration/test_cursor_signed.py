"""Issue 13 item 15: pagination cursors are signed (HMAC under a key derived from the
server secret) and bound to the listing they came from: a forged cursor, a tampered real
one, or a real one used for another listing is refused, a real one works. Refused with 422,
like every bad request since issue 12 (tests/integration/test_api_bad_requests.py); the
README's "400" was stale and now says 422."""

from __future__ import annotations

import base64
import datetime as dt
import uuid
from typing import Any

import pytest

from tests.conftest import Stack, bearer

# What this module checks does not depend on the carrier: it runs on moto only.
pytestmark = [pytest.mark.integration, pytest.mark.carrier_neutral]

NOOP = {"kind": "demo.noop", "payload": {}}
BAD = 422  # a bad request, as every other one


def b64(raw: str) -> str:
    return base64.urlsafe_b64encode(raw.encode()).decode().rstrip("=")


def first_page(api: Any, **params: Any) -> tuple[list[str], str]:
    for _ in range(3):
        assert api.post("/v1/jobs", json=NOOP).status_code == 202
    resp = api.get("/v1/jobs", params={"limit": 1, **params})
    assert resp.status_code == 200, resp.text
    cursor = resp.json()["next_cursor"]
    assert cursor
    return [j["id"] for j in resp.json()["items"]], cursor


def test_a_forged_cursor_is_refused(api: Any) -> None:
    """Issue 13 item 15: base64 of any timestamp and id is not a cursor the API handed out."""
    first_page(api)
    future = dt.datetime(2999, 1, 1, tzinfo=dt.UTC).isoformat()
    for forged in (b64(f"{future}|{uuid.uuid4()}"), b64(f"{future}|{uuid.uuid4()}") + ".AAAA"):
        resp = api.get("/v1/jobs", params={"cursor": forged})
        assert resp.status_code == BAD, (forged, resp.text)
        assert "cursor" in resp.json()["detail"]


def test_a_tampered_real_cursor_is_refused_and_the_real_one_works(api: Any) -> None:
    """Issue 13 item 15: changing the position of a real cursor breaks its signature."""
    seen, cursor = first_page(api)
    position, _, mac = cursor.partition(".")
    raw = base64.urlsafe_b64decode(position + "=" * (-len(position) % 4)).decode()
    created, _ = raw.split("|", 1)
    moved = b64(f"{created}|{uuid.uuid4()}")
    flipped = ("A" if mac[0] != "A" else "B") + mac[1:]
    # The last character of 16 bytes in base64 carries 2 unused bits: another value there
    # decodes to the same signature, and is still not the text the API handed out.
    alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
    unused = mac[:-1] + alphabet[alphabet.index(mac[-1]) ^ 1]
    assert base64.urlsafe_b64decode(unused + "==") == base64.urlsafe_b64decode(mac + "==")
    for tampered in (f"{moved}.{mac}", f"{position}.{flipped}", f"{position}.{unused}", position):
        resp = api.get("/v1/jobs", params={"cursor": tampered})
        assert resp.status_code == BAD, (tampered, resp.text)

    resp = api.get("/v1/jobs", params={"cursor": cursor, "limit": 1})
    assert resp.status_code == 200, resp.text
    assert [j["id"] for j in resp.json()["items"]] != seen
    assert len(resp.json()["items"]) == 1


def test_a_cursor_is_bound_to_its_listing(api: Any, stack: Stack) -> None:
    """Issue 13 item 15: a real cursor used with other filters, or by another tenant, is
    refused rather than answered with a page of some other listing."""
    _, cursor = first_page(api, kind="demo.noop")
    assert api.get("/v1/jobs", params={"cursor": cursor, "kind": "demo.noop"}).status_code == 200
    other_filters = api.get("/v1/jobs", params={"cursor": cursor, "state": "queued"})
    assert other_filters.status_code == BAD, other_filters.text
    globex = api.get(
        "/v1/jobs",
        params={"cursor": cursor, "kind": "demo.noop"},
        headers=bearer(stack.key("globex")),
    )
    assert globex.status_code == BAD, globex.text
