"""Bad flow-control input at submission (issue 35), through the API: each is a clear 422
naming what was wrong, and nothing is written (no job, no event, no outbox row)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import pytest

from tests import flow_kinds

if TYPE_CHECKING:
    from fastapi.testclient import TestClient

# What this module checks does not depend on the carrier: it runs on moto only.
pytestmark = [pytest.mark.integration, pytest.mark.carrier_neutral]


@pytest.fixture(autouse=True)
def bad_key_kind() -> Iterator[None]:
    with flow_kinds.registered():
        yield


def written(sql: Any) -> tuple[int, int, int]:
    return tuple(
        sql.execute(f"SELECT count(*) AS n FROM {table}").fetchone()["n"]
        for table in ("jobs", "job_events", "outbox")
    )


BAD = [
    pytest.param(
        "/v1/jobs",
        {"kind": "demo.converse", "payload": {"conversation": "c"}, "key": "k" * 201},
        "body.key: String should have at most 200 characters",
        id="key-too-long",
    ),
    pytest.param(
        "/v1/jobs",
        {"kind": "demo.converse", "payload": {"conversation": "c"}, "key": ""},
        "body.key: String should have at least 1 character",
        id="key-empty",
    ),
    pytest.param(
        "/v1/jobs",
        {"kind": "demo.noop", "payload": {}, "if_active": "reject"},
        "if_active needs a key",
        id="if-active-without-a-key",
    ),
    pytest.param(
        "/v1/jobs",
        {"kind": "demo.converse", "payload": {"conversation": "c"}, "if_active": "interrupt"},
        "body.if_active: Input should be 'enqueue', 'reject'",
        id="if-active-unknown",
    ),
    pytest.param(
        "/v1/jobs",
        {"kind": "demo.reindex", "payload": {"document": "d"}, "delay_seconds": 5},
        "kind 'demo.reindex' debounces its jobs",
        id="debounce-with-a-delay",
    ),
    pytest.param(
        "/v1/jobs/batch",
        {
            "jobs": [
                {"kind": "demo.reindex", "payload": {"document": "d", "revision": 1}},
                {"kind": "demo.reindex", "payload": {"document": "d", "revision": 2}},
            ]
        },
        "jobs[1]: key 'd' of kind 'demo.reindex' is also jobs[0]'s",
        id="batch-with-one-key-twice",
    ),
    pytest.param(
        "/v1/jobs",
        {"kind": "test.flow_bad_key", "payload": {"how": "raise"}},
        "its key function failed on this payload: ValueError: this payload has no conversation",
        id="key-function-raises",
    ),
    pytest.param(
        "/v1/jobs",
        {"kind": "test.flow_bad_key", "payload": {"how": "list"}},
        "its key function returned list, not a str",
        id="key-function-not-a-str",
    ),
]


@pytest.mark.parametrize(("path", "body", "named"), BAD)
def test_bad_flow_input_is_a_422_naming_it_and_writes_nothing(
    api: TestClient, sql: Any, path: str, body: dict[str, Any], named: str
) -> None:
    before = written(sql)
    resp = api.post(path, json=body)
    assert resp.status_code == 422, resp.text
    detail = resp.json()["detail"]
    assert named in detail, detail
    assert written(sql) == before


def test_a_good_submission_of_the_same_kinds_is_accepted(api: TestClient, sql: Any) -> None:
    """The refusals above are the input's: the same kinds with good input are 202."""
    for body in (
        {"kind": "demo.converse", "payload": {"conversation": "c"}, "key": "k" * 200},
        {"kind": "test.flow_bad_key", "payload": {"how": "ok"}},
    ):
        resp = api.post("/v1/jobs", json=body)
        assert resp.status_code == 202, resp.text
    assert [
        r["flow_key"] for r in sql.execute("SELECT flow_key FROM jobs ORDER BY created_at")
    ] == [
        "k" * 200,
        "k",
    ]
