"""The operator routes over HTTP: cancel, redrive, dead letters."""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from typing import Any

import pytest

from app.api import create_app
from app.states import JobState
from tests.conftest import Stack, bearer, job_row
from tests.helpers import engine_for, receive_records

with warnings.catch_warnings():
    # starlette's TestClient warns at import about a future httpx; not our code.
    warnings.simplefilter("ignore")
    from fastapi.testclient import TestClient

pytestmark = pytest.mark.integration


@pytest.fixture
def client(stack: Stack) -> Iterator[TestClient]:
    with TestClient(create_app(stack.settings), headers=bearer(stack.key())) as c:
        yield c


async def process_all(stack: Stack, rounds: int = 6) -> None:
    async with engine_for(stack.settings) as engine:
        for _ in range(rounds):
            records = await receive_records(engine, wait=1)
            if records:
                await engine.handle({"Records": records}, None)


def post(client: TestClient, kind: str, payload: dict[str, Any], **extra: Any) -> str:
    resp = client.post("/v1/jobs", json={"kind": kind, "payload": payload, **extra})
    assert resp.status_code == 202, resp.text
    return str(resp.json()["id"])


def test_cancel_over_http_is_immediate_for_a_queued_job_and_409_once_finished(
    stack: Stack, client: TestClient, sql: Any
) -> None:
    job_id = post(client, "demo.noop", {})
    resp = client.post(f"/v1/jobs/{job_id}/cancel")
    assert resp.status_code == 200
    assert resp.json()["state"] == "cancelled"
    again = client.post(f"/v1/jobs/{job_id}/cancel")
    assert again.status_code == 409
    assert "already cancelled" in again.json()["detail"]
    assert client.post("/v1/jobs/00000000-0000-0000-0000-000000000000/cancel").status_code == 404


@pytest.mark.asyncio
async def test_dead_letters_are_listed_and_redriven_over_http(
    stack: Stack, client: TestClient, sql: Any
) -> None:
    ticket = {"ticket_id": "T-5", "subject": "[transient] Refund", "body": "charged twice"}
    job_id = post(client, "support.triage", ticket, max_attempts=1)
    ok_id = post(client, "demo.noop", {})
    await process_all(stack)
    listed = client.get("/v1/dead-letters").json()
    assert [j["id"] for j in listed] == [job_id]
    assert listed[0]["dead_lettered_by"] == "engine"
    assert listed[0]["last_error"].startswith("attempts used up")

    not_dead = client.post(f"/v1/jobs/{ok_id}/redrive")
    assert not_dead.status_code == 409
    assert "not dead_lettered" in not_dead.json()["detail"]

    resp = client.post(f"/v1/jobs/{job_id}/redrive")
    assert resp.status_code == 202
    assert resp.json()["state"] == "queued"
    assert resp.json()["attempt"] == 0
    await process_all(stack)
    row = job_row(sql, job_id)
    assert row["state"] == JobState.SUCCEEDED
    assert client.get("/v1/dead-letters").json() == []
