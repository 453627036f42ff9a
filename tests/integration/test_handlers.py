"""The Lambda entry points, fed events in the exact shape AWS sends (tests/events/*.json).

handlers/worker.py and handlers/api.py read their settings from the environment at
import time, as a Lambda cold start does: each test sets the stack's TASKLEASE_* and
AWS_* variables first and imports the module fresh.
"""

from __future__ import annotations

import copy
import hashlib
import importlib
import json
import sys
import time
import types
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from app import errors
from app.states import JobState
from app.transport import codec
from tests import carrier
from tests.conftest import Stack, job_row, past_stream_horizon, run
from tests.helpers import close_api_handler, dlq_messages, engine_for, submit

# The Lambda handlers run on SQS only (a function on the Redis carrier fails at cold start).
pytestmark = [pytest.mark.integration, pytest.mark.sqs_only]

EVENTS = Path(__file__).resolve().parent.parent / "events"
TICKET = {"ticket_id": "T-1", "subject": "Refund please", "body": "I was charged twice."}


def event(name: str) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads((EVENTS / name).read_text())
    return doc


def with_key(request: dict[str, Any], key: str) -> dict[str, Any]:
    """An API Gateway event whose caller sent ``Authorization: Bearer <key>``."""
    return {**request, "headers": {**request["headers"], "authorization": f"Bearer {key}"}}


class FakeLambdaContext:
    """What Lambda passes as ``context``: the parts the engine and Mangum read."""

    function_name = "tasklease-test"
    function_version = "$LATEST"
    invoked_function_arn = "arn:aws:lambda:us-east-1:123456789012:function:tasklease-test"
    memory_limit_in_mb = 512
    log_group_name = "/aws/lambda/tasklease-test"
    log_stream_name = "2026/01/01/[$LATEST]0123456789abcdef"

    def __init__(self, timeout_seconds: float = 900) -> None:
        self.aws_request_id = str(uuid.uuid4())
        self.deadline = time.monotonic() + timeout_seconds

    def get_remaining_time_in_millis(self) -> int:
        return max(0, int((self.deadline - time.monotonic()) * 1000))


@pytest.fixture
def lambda_env(stack: Stack, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """The function's environment, as its configuration would set it."""
    env = {k: v for k, v in stack.env.items() if k.startswith(("TASKLEASE_", "AWS_"))}
    env["TASKLEASE_WORKER_ID"] = "lambda-worker"
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    return env


def cold_start(module: str) -> types.ModuleType:
    """Import a handler module as a fresh Lambda process would (settings read now)."""
    sys.modules.pop(module, None)
    return importlib.import_module(module)


# --- the SQS worker -----------------------------------------------------------------


@pytest.fixture
def worker(lambda_env: dict[str, str]) -> Iterator[types.ModuleType]:
    from handlers import runtime

    module = cold_start("handlers.worker")
    yield module
    if module._engine is not None:
        engine = module._engine
        runtime.run(engine.close)
    runtime.loop().close()  # the next cold start gets a new loop
    sys.modules.pop("handlers.worker", None)


def now_ms() -> str:
    return str(int(time.time() * 1000))


def record_like(
    template: dict[str, Any], body: str, *, stamp: Callable[[], str] = now_ms
) -> dict[str, Any]:
    """A copy of a fixture record carrying ``body``, with a fresh message id and receive times."""
    record = copy.deepcopy(template)
    record["messageId"] = str(uuid.uuid4())
    record["receiptHandle"] = f"AQEB{uuid.uuid4().hex}fake..."
    record["body"] = body
    record["md5OfBody"] = hashlib.md5(body.encode()).hexdigest()
    record["attributes"]["SentTimestamp"] = stamp()
    record["attributes"]["ApproximateFirstReceiveTimestamp"] = stamp()
    return record


def submit_jobs(stack: Stack, *jobs: tuple[str, dict[str, Any]]) -> list[uuid.UUID]:
    async def go() -> list[uuid.UUID]:
        async with engine_for(stack.settings) as engine:
            return [await submit(engine, kind, payload) for kind, payload in jobs]

    ids: list[uuid.UUID] = run(go())
    return ids


def test_the_worker_handler_reports_only_the_transient_failure_as_a_batch_item_failure(
    stack: Stack, sql: Any, worker: types.ModuleType
) -> None:
    good, flaky = submit_jobs(
        stack, ("support.triage", TICKET), ("demo.flaky", {"fail_attempts": 1})
    )
    template = event("sqs_event.json")["Records"]
    not_ours = record_like(template[0], template[0]["body"])  # "Test message.": not a claim check
    good_record = record_like(template[0], codec.body_for(good))
    flaky_record = record_like(template[1], codec.body_for(flaky))
    lambda_event = {"Records": [good_record, not_ours, flaky_record]}

    response = worker.handler(lambda_event, FakeLambdaContext())

    assert response == {"batchItemFailures": [{"itemIdentifier": flaky_record["messageId"]}]}
    done = job_row(sql, good)
    assert done["state"] == JobState.SUCCEEDED
    assert done["attempt"] == 1
    assert done["lease_owner"] == "lambda-worker"
    assert done["result"]["category"] == "billing"
    keys = [
        r["key"]
        for r in sql.execute("SELECT key FROM effects WHERE job_id = %s ORDER BY seq", (good,))
    ]
    assert keys == ["triage", "post"]
    retrying = job_row(sql, flaky)
    assert retrying["state"] == JobState.RETRYING
    assert retrying["attempt"] == 1
    assert "attempt 1 fails on purpose" in retrying["last_error"]
    # The record that is not ours went to the DLQ as it came, with the reason.
    dead = [
        m
        for m in dlq_messages(stack, rounds=5, enough=lambda found: len(found) >= 1)
        if m["Body"] == "Test message."
    ]
    assert len(dead) == 1
    assert (
        "not a tasklease message" in dead[0]["MessageAttributes"][codec.ATTR_REASON]["StringValue"]
    )


def test_a_fake_receipt_handle_is_refused_by_the_queue_and_the_engine_tolerates_it(
    stack: Stack, sql: Any, worker: types.ModuleType
) -> None:
    """The backoff's ChangeMessageVisibility fails on the fixture's handle; the retry is still written."""
    (flaky,) = submit_jobs(stack, ("demo.flaky", {"fail_attempts": 1}))
    record = record_like(event("sqs_event.json")["Records"][0], codec.body_for(flaky))
    with pytest.raises(errors.QueueError):
        carrier.change_visibility(stack, record["receiptHandle"], 5)

    response = worker.handler({"Records": [record]}, FakeLambdaContext())

    assert response == {"batchItemFailures": [{"itemIdentifier": record["messageId"]}]}
    assert job_row(sql, flaky)["state"] == JobState.RETRYING


def test_the_engine_is_built_once_and_reused_across_invocations(
    stack: Stack, sql: Any, worker: types.ModuleType
) -> None:
    first_job, second_job = submit_jobs(stack, ("demo.noop", {}), ("demo.noop", {}))
    template = event("sqs_event.json")["Records"][1]

    assert worker.handler(
        {"Records": [record_like(template, codec.body_for(first_job))]}, FakeLambdaContext()
    ) == {"batchItemFailures": []}
    engine = worker._engine
    assert worker.handler(
        {"Records": [record_like(template, codec.body_for(second_job))]}, FakeLambdaContext()
    ) == {"batchItemFailures": []}
    assert worker._engine is engine
    assert (
        job_row(sql, first_job)["state"] == job_row(sql, second_job)["state"] == JobState.SUCCEEDED
    )


def test_an_empty_event_is_an_empty_response(worker: types.ModuleType) -> None:
    assert worker.handler({"Records": []}, FakeLambdaContext()) == {"batchItemFailures": []}


def test_a_message_first_received_long_ago_still_runs_its_job(
    stack: Stack, sql: Any, worker: types.ModuleType
) -> None:
    (job,) = submit_jobs(stack, ("support.triage", TICKET))

    def thirteen_hours_ago() -> str:
        return str(int((time.time() - 13 * 3600) * 1000))

    record = record_like(
        event("sqs_event.json")["Records"][1], codec.body_for(job), stamp=thirteen_hours_ago
    )
    record["attributes"]["ApproximateReceiveCount"] = "3"

    response = worker.handler({"Records": [record]}, FakeLambdaContext())

    assert job_row(sql, job)["state"] == JobState.SUCCEEDED
    assert response == {"batchItemFailures": []}


# --- the API through Mangum (API Gateway HTTP API, payload v2) ------------------------


@pytest.fixture
def api_handler(lambda_env: dict[str, str]) -> Iterator[types.ModuleType]:
    module = cold_start("handlers.api")
    yield module
    close_api_handler(module)


def test_healthz_through_api_gateway_is_200(api_handler: types.ModuleType) -> None:
    response = api_handler.handler(event("apigw_v2_get_healthz.json"), FakeLambdaContext(29))
    assert response["statusCode"] == 200
    assert json.loads(response["body"]) == {"status": "ok"}
    assert response["isBase64Encoded"] is False


def test_head_healthz_through_api_gateway_is_200_without_a_body(
    api_handler: types.ModuleType,
) -> None:
    """Issue 30 item 8: an uptime check's HEAD, as API Gateway hands it to Mangum."""
    request = event("apigw_v2_get_healthz.json")
    request["requestContext"]["http"]["method"] = "HEAD"
    response = api_handler.handler(request, FakeLambdaContext(29))
    assert response["statusCode"] == 200, response
    assert response["body"] == ""


def test_post_job_through_api_gateway_is_202_with_location_and_writes_the_job(
    api_handler: types.ModuleType, stack: Stack, sql: Any
) -> None:
    request = with_key(event("apigw_v2_post_job.json"), stack.key())

    response = api_handler.handler(request, FakeLambdaContext(29))

    assert response["statusCode"] == 202, response
    job = json.loads(response["body"])
    headers = {k.lower(): v for k, v in response["headers"].items()}
    assert headers["location"] == f"/v1/jobs/{job['id']}"
    assert job["state"] == JobState.QUEUED
    row = job_row(sql, job["id"])
    assert row["kind"] == "support.triage"
    assert row["idempotency_key"] == request["headers"]["idempotency-key"]
    assert row["payload"] == json.loads(request["body"])["payload"]
    # Marked sent before the answer: the process may be frozen once it returns.
    mark = sql.execute("SELECT sent_at FROM outbox WHERE job_id = %s", (job["id"],)).fetchone()
    assert mark["sent_at"] is not None
    sent = carrier.receive_raw(stack, wait=2)
    assert [json.loads(m["Body"]) for m in sent] == [{"job_id": job["id"], "v": 1}]


def test_a_warm_api_function_serves_invocation_after_invocation(
    api_handler: types.ModuleType, stack: Stack, sql: Any
) -> None:
    """Mangum runs the app's lifespan around every invocation: the second must work too."""
    assert (
        api_handler.handler(event("apigw_v2_get_healthz.json"), FakeLambdaContext(29))["statusCode"]
        == 200
    )
    post = with_key(event("apigw_v2_post_job.json"), stack.key())
    first = api_handler.handler(post, FakeLambdaContext(29))
    replay = api_handler.handler(post, FakeLambdaContext(29))

    assert first["statusCode"] == 202, first
    assert replay["statusCode"] == 202, replay
    assert json.loads(replay["body"])["id"] == json.loads(first["body"])["id"]
    assert {k.lower(): v for k, v in replay["headers"].items()}["idempotent-replayed"] == "true"
    assert sql.execute("SELECT count(*) AS n FROM jobs").fetchone()["n"] == 1


def _get(path: str, query: str = "", key: str | None = None) -> dict[str, Any]:
    request = event("apigw_v2_get_healthz.json")
    request["rawPath"] = request["requestContext"]["http"]["path"] = path
    request["rawQueryString"] = query
    return with_key(request, key) if key else request


def test_behind_api_gateway_metrics_are_not_served_and_streams_answer_long_polls(
    api_handler: types.ModuleType, stack: Stack, sql: Any
) -> None:
    """/metrics asks for no key, so behind API Gateway it would be public: 404 there (the
    figures go out as EMF). A stream route answers a long poll even without ?after=:
    a Python Lambda cannot stream its answer."""
    metrics = api_handler.handler(_get("/metrics"), FakeLambdaContext(29))
    assert metrics["statusCode"] == 404, metrics
    key = stack.key()
    posted = api_handler.handler(
        with_key(event("apigw_v2_post_job.json"), key), FakeLambdaContext(29)
    )
    job = json.loads(posted["body"])
    past_stream_horizon(sql)
    page = api_handler.handler(
        _get(f"/v1/jobs/{job['id']}/stream", "wait=0", key), FakeLambdaContext(29)
    )
    assert page["statusCode"] == 200, page
    body = json.loads(page["body"])
    assert [e["data"]["to_state"] for e in body["events"]] == ["queued"]
    assert body["done"] is False


def test_each_invocation_counts_on_its_lambda_environments_row(
    stack: Stack, sql: Any, worker: types.ModuleType
) -> None:
    """No process heartbeats on Lambda: each invocation adds one to the row of its
    environment (function and log stream), with the records it carried."""
    jobs = submit_jobs(stack, ("demo.noop", {}), ("demo.noop", {}), ("demo.noop", {}))
    template = event("sqs_event.json")["Records"][1]
    ctx = FakeLambdaContext()
    first = {"Records": [record_like(template, codec.body_for(j)) for j in jobs[:2]]}
    assert worker.handler(first, ctx) == {"batchItemFailures": []}
    row = sql.execute("SELECT * FROM workers").fetchone()
    assert row["id"] == f"lambda:{ctx.function_name}:{ctx.log_stream_name}"
    assert (row["runtime"], row["invocations"], row["messages"]) == ("lambda", 1, 2)
    seen = row["last_seen"]

    second = {"Records": [record_like(template, codec.body_for(jobs[2]))]}
    assert worker.handler(second, FakeLambdaContext()) == {"batchItemFailures": []}
    (row,) = sql.execute("SELECT * FROM workers").fetchall()
    assert (row["invocations"], row["messages"]) == (2, 3)
    assert row["last_seen"] > seen
    assert row["stopped_at"] is None
    assert all(job_row(sql, j)["state"] == JobState.SUCCEEDED for j in jobs)
