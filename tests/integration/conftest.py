"""The integration tests' shared fixtures: the API in this process, with settings."""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from typing import Any

import pytest

from app.api import create_app
from tests.conftest import Stack, bearer
from tests.traced import spans  # noqa: F401 (the trace tests' fixture)

with warnings.catch_warnings():
    # starlette >= 1.10 warns at import that it found httpx rather than httpx2 (see test_api.py).
    warnings.filterwarnings("ignore", message="Using `httpx` with `starlette.testclient`")
    from fastapi.testclient import TestClient

NOOP = {"kind": "demo.noop", "payload": {}}
# A rate so slow that no token comes back while a test runs: refusals do not depend on timing.
TRICKLE = 0.001


class Api:
    """One API app in this process, and a key for each tenant it is asked about."""

    def __init__(self, stack: Stack, client: TestClient) -> None:
        self.stack = stack
        self.client = client
        self.keys: dict[str, str] = {}

    def post(self, tenant: str = "acme", body: Any = NOOP, **headers: str) -> Any:
        if tenant not in self.keys:
            self.keys[tenant] = self.stack.key(tenant)
        return self.client.post(
            "/v1/jobs", json=body, headers={**bearer(self.keys[tenant]), **headers}
        )


@pytest.fixture
def api_with(stack: Stack) -> Iterator[Any]:
    """api_with(**settings): the API with these settings overridden."""
    clients: list[TestClient] = []

    def make(**overrides: Any) -> Api:
        client = TestClient(create_app(stack.with_settings(**overrides)))
        client.__enter__()
        clients.append(client)
        return Api(stack, client)

    yield make
    for client in clients:
        client.__exit__(None, None, None)


def written(sql: Any) -> tuple[int, int, int]:
    """(jobs, outbox rows, job events)."""
    row = sql.execute(
        "SELECT (SELECT count(*) FROM jobs) AS jobs, (SELECT count(*) FROM outbox) AS outbox, "
        "(SELECT count(*) FROM job_events) AS events"
    ).fetchone()
    return int(row["jobs"]), int(row["outbox"]), int(row["events"])


def retry_after(resp: Any) -> int:
    """Retry-After as RFC 9110 §10.2.3 has it here: delay-seconds, at least one."""
    value = resp.headers["Retry-After"]
    assert value.isdigit(), value
    assert int(value) >= 1
    return int(value)
