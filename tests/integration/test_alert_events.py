"""Alerts on EventBridge (TASKLEASE_ALERT_EVENT_BUS), against moto's server: a bus, a rule
on tasklease's events with an SQS queue as its target, and the queue read back."""

from __future__ import annotations

import json
import uuid
from typing import Any

import boto3
import pytest

from app.services import alerts
from app.states import JobState
from tests.conftest import REGION, Stack, job_row
from tests.helpers import drain, engine_for, submit

# EventBridge is checked against moto's server (LocalStack's host mode runs SQS only).
pytestmark = [pytest.mark.integration, pytest.mark.only_on("moto")]


@pytest.mark.asyncio
async def test_a_dead_letter_is_put_on_the_event_bus_once(
    stack: Stack, sql: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    endpoint = stack.env["AWS_ENDPOINT_URL_SQS"]
    monkeypatch.setenv("AWS_ENDPOINT_URL_EVENTBRIDGE", endpoint)
    bus = f"tl-alerts-{uuid.uuid4().hex[:8]}"
    eb = boto3.client("events", region_name=REGION, endpoint_url=endpoint)
    eb.create_event_bus(Name=bus)
    target = stack.sqs.create_queue(QueueName=f"{bus}-target")["QueueUrl"]
    arn = stack.sqs.get_queue_attributes(QueueUrl=target, AttributeNames=["QueueArn"])[
        "Attributes"
    ]["QueueArn"]
    eb.put_rule(
        Name="tasklease-alerts",
        EventBusName=bus,
        EventPattern=json.dumps({"source": ["tasklease"], "detail-type": ["job.dead_lettered"]}),
    )
    eb.put_targets(Rule="tasklease-alerts", EventBusName=bus, Targets=[{"Id": "q", "Arn": arn}])
    settings = stack.with_settings(alert_event_bus=bus)

    async with engine_for(settings) as engine:
        job_id = await submit(engine, "demo.flaky", {"permanent": True})
        await drain(engine, sql, [job_id])
        assert job_row(sql, job_id)["state"] == JobState.DEAD_LETTERED
        assert await alerts.deliver(settings, engine.db) == 1
        assert await alerts.deliver(settings, engine.db) == 0  # delivered: not put again

    got = stack.sqs.receive_message(QueueUrl=target, MaxNumberOfMessages=10, WaitTimeSeconds=2)
    messages = got.get("Messages", [])
    assert len(messages) == 1, messages
    event = json.loads(messages[0]["Body"])
    assert event["source"] == "tasklease"
    assert event["detail-type"] == "job.dead_lettered"
    assert event["detail"]["job_id"] == str(job_id)
    assert event["detail"]["data"]["kind"] == "demo.flaky"
    assert event["resources"] == [f"tasklease:job/{job_id}"]
    [row] = sql.execute("SELECT delivered, delivered_at FROM alerts").fetchall()
    assert row["delivered"] == ["eventbridge"] and row["delivered_at"] is not None
