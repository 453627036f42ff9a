"""What one tenant may ask of the API: its token bucket and its cap of unfinished jobs
(checked in the statement that writes the job), the body size, and the ranges of each field.
A refused request writes nothing: no job, no outbox row, no message."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest

from app.settings import aws_limits as limits
from app.settings import bounds
from tests.conftest import Stack, bearer
from tests.helpers import queue_depth
from tests.integration.conftest import TRICKLE, retry_after, written

# What this module checks does not depend on the carrier: it runs on moto only.
pytestmark = [pytest.mark.integration, pytest.mark.carrier_neutral]

NOOP = {"kind": "demo.noop", "payload": {}}


# --- the token bucket -------------------------------------------------------------------


def test_submissions_beyond_the_burst_are_429_with_retry_after_and_write_nothing(
    api_with: Any, stack: Stack, sql: Any
) -> None:
    api = api_with(rate_limit_per_second=TRICKLE, rate_limit_burst=3)
    accepted = [api.post() for _ in range(3)]
    assert [r.status_code for r in accepted] == [202, 202, 202]
    before, depth = written(sql), queue_depth(stack)

    refused = [api.post(), api.post(body={"kind": "demo.noop", "payload": {"n": 2}})]

    for resp in refused:
        assert resp.status_code == 429, resp.text
        # The window is burst / rate = 3,000 s: the first job leaves it in just under that.
        assert 2900 <= retry_after(resp) <= 3000
        assert "rate limit" in resp.json()["detail"]
    assert written(sql) == before == (3, 3, 3)
    assert queue_depth(stack) == depth
    # Another tenant has a bucket of its own.
    assert [api.post("globex").status_code for _ in range(3)] == [202, 202, 202]
    assert api.post("globex").status_code == 429
    tenants = sql.execute("SELECT tenant, count(*) AS n FROM jobs GROUP BY tenant ORDER BY 1")
    assert [(r["tenant"], r["n"]) for r in tenants] == [("acme", 3), ("globex", 3)]


def test_the_window_slides_and_admits_again(api_with: Any, sql: Any) -> None:
    # Given: acme's window is full at a rate whose window outlasts the test.
    api = api_with(rate_limit_per_second=TRICKLE, rate_limit_burst=1)
    assert api.post().status_code == 202
    assert api.post().status_code == 429

    # When: the operator raises acme's rate (tenant_limits, as `tasklease limits set` writes)
    # and a little time passes: at 50 jobs/s a burst of one is a window of 0.02 s.
    sql.execute("INSERT INTO tenant_limits (tenant, rate_per_second) VALUES ('acme', 50)")
    time.sleep(0.2)

    # Then: one more job is accepted; back at the trickle rate (the override cleared, as
    # `tasklease limits clear` does) the window holds it, and the next one is refused.
    assert api.post().status_code == 202
    sql.execute("DELETE FROM tenant_limits WHERE tenant = 'acme'")
    assert api.post().status_code == 429
    assert written(sql)[0] == 2


def test_a_tenants_own_limits_override_the_defaults(api_with: Any, sql: Any) -> None:
    api = api_with()  # the defaults: a burst of 100
    sql.execute(
        "INSERT INTO tenant_limits (tenant, rate_per_second, burst) VALUES ('acme', %s, 2)",
        (TRICKLE,),
    )
    assert [api.post().status_code for _ in range(3)] == [202, 202, 429]
    assert [api.post("globex").status_code for _ in range(3)] == [202, 202, 202]


# --- the in-flight cap ------------------------------------------------------------------


def test_at_the_in_flight_cap_submissions_are_429_until_a_job_finishes(
    api_with: Any, stack: Stack, sql: Any
) -> None:
    api = api_with(max_jobs_in_flight=2)
    first, second = (api.post().json()["id"] for _ in range(2))
    before, depth = written(sql), queue_depth(stack)

    refused = api.post()

    assert refused.status_code == 429, refused.text
    assert retry_after(refused) == 5
    assert "2 unfinished jobs" in refused.json()["detail"]
    assert written(sql) == before
    assert queue_depth(stack) == depth
    assert api.post("globex").status_code == 202  # another tenant's cap is its own

    # A job that stops being unfinished frees its place: cancelled here, succeeded alike.
    cancel = api.client.post(f"/v1/jobs/{first}/cancel", headers=bearer(api.keys["acme"]))
    assert cancel.status_code == 200
    assert api.post().status_code == 202
    assert api.post().status_code == 429
    sql.execute("UPDATE jobs SET state = 'succeeded', finished_at = now() WHERE id = %s", (second,))
    assert api.post().status_code == 202


@pytest.mark.parametrize(
    ("limit", "settings"),
    [
        ("rate", {"rate_limit_per_second": TRICKLE, "rate_limit_burst": 1}),
        ("in flight", {"max_jobs_in_flight": 1}),
    ],
)
def test_an_idempotent_replay_is_answered_even_over_the_limit(
    api_with: Any, stack: Stack, sql: Any, limit: str, settings: dict[str, Any]
) -> None:
    api = api_with(**settings)
    first = api.post(**{"Idempotency-Key": "order-1"})
    assert first.status_code == 202
    assert api.post(**{"Idempotency-Key": "order-2"}).status_code == 429  # over the limit now
    before, depth = written(sql), queue_depth(stack)

    replay = api.post(**{"Idempotency-Key": "order-1"})

    assert replay.status_code == 202, (limit, replay.text)
    assert replay.headers["Idempotent-Replayed"] == "true"
    assert replay.json()["id"] == first.json()["id"]
    assert replay.headers["Location"] == first.headers["Location"]
    # The same key with another body is still the caller's mistake, over the limit or not.
    other_body = {"kind": "demo.noop", "payload": {"x": 1}}
    other = api.post(body=other_body, **{"Idempotency-Key": "order-1"})
    assert other.status_code == 409
    assert written(sql) == before
    assert queue_depth(stack) == depth


# --- the body ---------------------------------------------------------------------------

SMALLEST_LIMIT = 1024  # TASKLEASE_MAX_BODY_BYTES's minimum


def body_of(size: int) -> bytes:
    """A valid job request of exactly ``size`` bytes."""
    head, tail = b'{"kind": "demo.noop", "payload": {"pad": "', b'"}}'
    return head + b"x" * (size - len(head) - len(tail)) + tail


def test_a_body_over_max_body_bytes_is_413_with_or_without_content_length(
    api_with: Any, stack: Stack, sql: Any
) -> None:
    api = api_with(max_body_bytes=SMALLEST_LIMIT)
    key = api.stack.key("acme")
    headers = {**bearer(key), "content-type": "application/json"}

    at_limit = api.client.post("/v1/jobs", content=body_of(SMALLEST_LIMIT), headers=headers)
    assert at_limit.status_code == 202, at_limit.text
    before, depth = written(sql), queue_depth(stack)

    over = api.client.post("/v1/jobs", content=body_of(SMALLEST_LIMIT + 1), headers=headers)

    def chunks() -> Iterator[bytes]:
        body = body_of(4 * SMALLEST_LIMIT)
        for i in range(0, len(body), 100):
            yield body[i : i + 100]

    chunked = api.client.post("/v1/jobs", content=chunks(), headers=headers)
    # Unauthenticated, the size is still checked first: nothing is read past the limit.
    anonymous = api.client.post(
        "/v1/jobs",
        content=body_of(2 * SMALLEST_LIMIT),
        headers={"content-type": "application/json"},
    )

    assert "content-length" in {k.lower() for k in over.request.headers}
    assert chunked.request.headers.get("transfer-encoding") == "chunked"
    assert "content-length" not in {k.lower() for k in chunked.request.headers}
    for resp in (over, chunked, anonymous):
        assert resp.status_code == 413, resp.text
        assert resp.json() == {
            "detail": "the request body is larger than 1024 bytes (TASKLEASE_MAX_BODY_BYTES)"
        }
    assert written(sql) == before
    assert queue_depth(stack) == depth


# --- the fields ---------------------------------------------------------------------------


ATTEMPTS = "allowed: 1 to 100"
TIMEOUT = f"allowed: 1 to {limits.MAX_VISIBILITY_SECONDS}"
OUT_OF_RANGE: list[tuple[dict[str, Any], list[str]]] = [
    ({**NOOP, "max_attempts": 0}, ["body.max_attempts", ATTEMPTS]),
    ({**NOOP, "max_attempts": -5}, ["body.max_attempts", ATTEMPTS]),
    ({**NOOP, "max_attempts": 10**12}, ["body.max_attempts", ATTEMPTS]),
    # Within 1..100 but not below the queue's maxReceiveCount (20): the service says so.
    ({**NOOP, "max_attempts": 20}, ["max_attempts", "between 1 and 19", "maxReceiveCount"]),
    ({**NOOP, "timeout_seconds": 0}, ["body.timeout_seconds", TIMEOUT]),
    ({**NOOP, "timeout_seconds": 43201}, ["body.timeout_seconds", TIMEOUT]),
    ({**NOOP, "timeout_seconds": 10**30}, ["body.timeout_seconds", TIMEOUT]),
    ({**NOOP, "max_attempts": "many"}, ["body.max_attempts"]),
    ({"kind": "no.such.kind", "payload": {}}, ["unknown job kind 'no.such.kind'"]),
    (
        {"kind": "demo.sleep", "payload": {"seconds": 7200}},
        ["payload.seconds", "less than or equal to 3600"],
    ),
    ({"kind": "demo.sleep", "payload": {"steps": "x"}}, ["payload.steps"]),
    ({"kind": "demo.flaky", "payload": {"surprise": 1}}, ["payload.surprise"]),
    ({"kind": "", "payload": {}}, ["body.kind"]),
]


def test_a_field_out_of_range_is_422_naming_the_field_and_the_range_and_writes_nothing(
    api_with: Any, sql: Any
) -> None:
    api = api_with(rate_limit_per_second=TRICKLE, rate_limit_burst=1)
    for body, mentions in OUT_OF_RANGE:
        resp = api.post(body=body)
        assert resp.status_code == 422, (body, resp.text)
        detail = resp.json()["detail"]
        assert isinstance(detail, str), body  # one readable line
        for words in mentions:
            assert words in detail, (body, detail)
    assert written(sql) == (0, 0, 0)
    # A refused body uses up none of the rate (the window counts written jobs only): the
    # one job the burst allows is still there to take.
    assert [api.post().status_code for _ in range(2)] == [202, 429]


def test_a_bad_cursor_and_a_bad_job_id_are_422(api_with: Any) -> None:
    api = api_with()
    key = bearer(api.stack.key("acme"))
    cursor = api.client.get("/v1/jobs", params={"cursor": "not-ours"}, headers=key)
    assert cursor.status_code == 422
    assert cursor.json() == {"detail": "cursor is not one this API returned for this listing"}
    for path in ("/v1/jobs/42", "/v1/jobs/42/events", "/v1/jobs/42/effects"):
        resp = api.client.get(path, headers=key)
        assert resp.status_code == 422, path
        assert resp.json()["detail"].startswith("path.job_id: "), path
    for path in ("/v1/jobs/42/cancel", "/v1/jobs/42/redrive"):
        assert api.client.post(path, headers=key).status_code == 422, path
    limit = api.client.get("/v1/jobs", params={"limit": 1000}, headers=key)
    assert limit.status_code == 422
    assert f"allowed: 1 to {bounds.MAX_PAGE}" in limit.json()["detail"]
