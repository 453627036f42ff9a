"""The three Lambda functions driven in-process, as AWS would invoke them: the API through
Mangum with API Gateway HTTP API (payload 2.0) events, the worker with SQS event source
mapping batches built from messages received from the real queue, the sweeper with the
scheduler's input. Each call is timed (Lambda bills the handler's duration, rounded up to
the millisecond). Used by bench/cost.py."""

from __future__ import annotations

import hashlib
import importlib
import json
import math
import sys
import time
import types
import uuid
from dataclasses import dataclass, field
from typing import Any


@dataclass
class Timings:
    """Handler wall times of one function's invocations, in ms."""

    ms: list[float] = field(default_factory=list)

    def add(self, ms: float) -> None:
        self.ms.append(ms)

    def summary(self) -> dict[str, Any]:
        n = len(self.ms)
        billed = [math.ceil(m) for m in self.ms]
        ordered = sorted(self.ms)
        return {
            "invocations": n,
            "mean_ms": round(sum(self.ms) / n, 3) if n else 0.0,
            "p50_ms": round(ordered[n // 2], 3) if n else 0.0,
            # Lambda rounds each invocation up to the millisecond: the mean of the rounded.
            "billed_mean_ms": round(sum(billed) / n, 3) if n else 0.0,
        }


def cold_start(module: str) -> types.ModuleType:
    """Import a handler module as a fresh Lambda process would (settings read now)."""
    sys.modules.pop(module, None)
    return importlib.import_module(module)


def api_event(method: str, path: str, body: dict[str, Any] | None, key: str) -> dict[str, Any]:
    """An API Gateway HTTP API (payload format 2.0) request event."""
    text = json.dumps(body) if body is not None else ""
    return {
        "version": "2.0",
        "routeKey": "$default",
        "rawPath": path,
        "rawQueryString": "",
        "headers": {
            "accept": "application/json",
            "content-type": "application/json",
            "content-length": str(len(text.encode())),
            "host": "cost.execute-api.us-east-1.amazonaws.com",
            "authorization": f"Bearer {key}",
            "x-forwarded-proto": "https",
            "x-forwarded-port": "443",
            "x-forwarded-for": "192.0.2.1",
        },
        "requestContext": {
            "accountId": "123456789012",
            "apiId": "cost",
            "domainName": "cost.execute-api.us-east-1.amazonaws.com",
            "domainPrefix": "cost",
            "http": {
                "method": method,
                "path": path,
                "protocol": "HTTP/1.1",
                "sourceIp": "192.0.2.1",
                "userAgent": "tasklease-cost",
            },
            "requestId": uuid.uuid4().hex,
            "routeKey": "$default",
            "stage": "$default",
            "time": "01/Jan/2026:00:00:00 +0000",
            "timeEpoch": int(time.time() * 1000),
        },
        "body": text,
        "isBase64Encoded": False,
    }


def record_of(message: dict[str, Any], arn: str) -> dict[str, Any]:
    """An SQS event source mapping record made from a received message (Lambda's shape:
    camel-case keys, message attributes as ``stringValue``/``dataType``)."""
    attrs = {
        name: {
            "stringValue": v.get("StringValue"),
            "stringListValues": [],
            "binaryListValues": [],
            "dataType": v.get("DataType", "String"),
        }
        for name, v in (message.get("MessageAttributes") or {}).items()
    }
    body = str(message["Body"])
    return {
        "messageId": message["MessageId"],
        "receiptHandle": message["ReceiptHandle"],
        "body": body,
        "attributes": dict(message.get("Attributes") or {}),
        "messageAttributes": attrs,
        "md5OfBody": hashlib.md5(body.encode()).hexdigest(),  # noqa: S324 - SQS's own checksum
        "eventSource": "aws:sqs",
        "eventSourceARN": arn,
        "awsRegion": "us-east-1",
    }


class EventSource:
    """The event source mapping's part: ReceiveMessage, invoke, DeleteMessageBatch of the
    records the function did not report as failures. It talks to the SQS server directly,
    not through the counting proxy: these are AWS's requests, added by the pricing, not
    the code's. It counts them."""

    def __init__(self, endpoint: str, queue_url: str) -> None:
        import boto3  # here: bench/cost_memory.py's worker process imports Context only

        self.sqs = boto3.client("sqs", endpoint_url=endpoint, region_name="us-east-1")
        self.url = queue_url
        attrs = self.sqs.get_queue_attributes(QueueUrl=queue_url, AttributeNames=["QueueArn"])
        self.arn = attrs["Attributes"]["QueueArn"]
        self.receives = 0
        self.deletes = 0
        self.records = 0

    def receive(self, max_messages: int) -> list[dict[str, Any]]:
        got = self.sqs.receive_message(
            QueueUrl=self.url,
            MaxNumberOfMessages=max_messages,
            WaitTimeSeconds=1,
            AttributeNames=["All"],
            MessageAttributeNames=["All"],
        )
        messages = got.get("Messages") or []
        if messages:
            self.receives += 1
        return [record_of(m, self.arn) for m in messages]

    def delete(self, records: list[dict[str, Any]], failures: list[dict[str, str]]) -> None:
        failed = {f["itemIdentifier"] for f in failures}
        done = [r for r in records if r["messageId"] not in failed]
        if not done:
            return
        self.sqs.delete_message_batch(
            QueueUrl=self.url,
            Entries=[
                {"Id": str(i), "ReceiptHandle": r["receiptHandle"]} for i, r in enumerate(done)
            ],
        )
        self.deletes += 1

    def counts(self) -> dict[str, int]:
        return {
            "ReceiveMessage": self.receives,
            "DeleteMessageBatch": self.deletes,
            "records": self.records,
        }


def timed(fn: Any, *args: Any) -> tuple[Any, float]:
    t0 = time.perf_counter()
    out = fn(*args)
    return out, (time.perf_counter() - t0) * 1000
