"""Smoke check for the host-mode LocalStack started by localstack/run.sh.

Run with any Python that has boto3 (the LocalStack venv has it):

    .localstack/venv/bin/python localstack/smoke_check.py

Exercises the SQS calls tasklease relies on and prints what LocalStack does
for StartMessageMoveTask (DLQ redrive). Exits non-zero on the first failed check.
Every queue it creates has a random suffix and is deleted at the end.
"""

from __future__ import annotations

import json
import os
import threading
import time
import uuid

import boto3

ENDPOINT = os.environ.get(
    "AWS_ENDPOINT_URL", f"http://127.0.0.1:{os.environ.get('LOCALSTACK_PORT', '4566')}"
)
SUFFIX = uuid.uuid4().hex[:8]

sqs = boto3.client(
    "sqs",
    endpoint_url=ENDPOINT,
    region_name="us-east-1",
    aws_access_key_id="test",
    aws_secret_access_key="test",
)
created: list[str] = []


def check(cond: bool, what: str) -> None:
    print(("ok   " if cond else "FAIL ") + what)
    if not cond:
        raise SystemExit(1)


def make_queue(name: str, **attrs: str) -> tuple[str, str]:
    url = sqs.create_queue(QueueName=f"{name}-{SUFFIX}", Attributes=attrs)["QueueUrl"]
    created.append(url)
    arn = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"][
        "QueueArn"
    ]
    return url, arn


def count(url: str) -> int:
    a = sqs.get_queue_attributes(
        QueueUrl=url,
        AttributeNames=["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"],
    )["Attributes"]
    return int(a["ApproximateNumberOfMessages"]) + int(a["ApproximateNumberOfMessagesNotVisible"])


def wait_move_task(source_arn: str, handle: str, timeout: float = 30) -> dict:
    """Wait until the newest move task of source_arn is no longer RUNNING.

    ListMessageMoveTasks returns the most recent task first and (as on AWS)
    only includes TaskHandle while the task is RUNNING, so the handle can't be
    used to find a finished task; only one active task per source is allowed.
    """
    deadline = time.monotonic() + timeout
    while True:
        res = sqs.list_message_move_tasks(SourceArn=source_arn, MaxResults=1)["Results"]
        if res and res[0]["Status"] not in ("RUNNING", "CREATED", "CANCELLING"):
            return res[0]
        if time.monotonic() > deadline:
            raise SystemExit(f"move task {handle} did not finish in {timeout}s: {res}")
        time.sleep(0.1)


def receive_all(url: str, n: int, wait: int = 1) -> list[dict]:
    out: list[dict] = []
    deadline = time.monotonic() + 10
    while len(out) < n and time.monotonic() < deadline:
        out += sqs.receive_message(
            QueueUrl=url,
            MaxNumberOfMessages=10,
            WaitTimeSeconds=wait,
            AttributeNames=["All"],
            MessageAttributeNames=["All"],
        ).get("Messages", [])
    return out


def redrive_checks() -> None:
    dlq_url, dlq_arn = make_queue("smoke-dlq")
    src_url, src_arn = make_queue(
        "smoke-src",
        RedrivePolicy=json.dumps({"deadLetterTargetArn": dlq_arn, "maxReceiveCount": "5"}),
        VisibilityTimeout="30",
    )
    print(f"     queue url example: {src_url}")
    attrs = {"attempt": {"DataType": "Number", "StringValue": "7"},
             "kind": {"DataType": "String", "StringValue": "task"}}

    # A: message sent straight to the DLQ (it has no dead-letter source), move task
    #    without DestinationArn.
    sqs.send_message(QueueUrl=dlq_url, MessageBody="direct", MessageAttributes=attrs)
    h = sqs.start_message_move_task(SourceArn=dlq_arn)["TaskHandle"]
    t = wait_move_task(dlq_arn, h)
    print(f"     A: direct-to-DLQ msg, no DestinationArn -> {t['Status']} "
          f"moved={t.get('ApproximateNumberOfMessagesMoved')} reason={t.get('FailureReason')!r}")
    time.sleep(1.5)  # the failed task's receive used a 1 s visibility timeout
    print(f"     A: messages left in DLQ={count(dlq_url)} in source={count(src_url)}")
    for m in receive_all(dlq_url, 1):  # clean up for B
        sqs.delete_message(QueueUrl=dlq_url, ReceiptHandle=m["ReceiptHandle"])

    # B: message sent straight to the DLQ, move task with DestinationArn=source.
    sent = sqs.send_message(QueueUrl=dlq_url, MessageBody="to-move", MessageAttributes=attrs)
    peek = receive_all(dlq_url, 1)[0]
    sqs.change_message_visibility(QueueUrl=dlq_url, ReceiptHandle=peek["ReceiptHandle"],
                                  VisibilityTimeout=0)
    time.sleep(1.1)  # make a changed SentTimestamp visible
    h = sqs.start_message_move_task(SourceArn=dlq_arn, DestinationArn=src_arn)["TaskHandle"]
    t = wait_move_task(dlq_arn, h)
    check(t["Status"] == "COMPLETED", f"B: move task with DestinationArn -> {t['Status']}")
    got = receive_all(src_url, 1)
    check(len(got) == 1, "B: moved message received from source queue")
    m = got[0]
    check(m["Body"] == "to-move", "B: body preserved")
    check(m.get("MessageAttributes") == attrs, "B: message attributes preserved")
    print(f"     B: MessageId kept={m['MessageId'] == sent['MessageId']} "
          f"SentTimestamp kept={m['Attributes']['SentTimestamp'] == peek['Attributes']['SentTimestamp']} "
          f"ApproximateReceiveCount={m['Attributes']['ApproximateReceiveCount']} "
          f"(was {peek['Attributes']['ApproximateReceiveCount']} in DLQ)")
    sqs.delete_message(QueueUrl=src_url, ReceiptHandle=m["ReceiptHandle"])

    # C: message dead-lettered by the redrive policy (5 receives), then moved back
    #    without DestinationArn.
    sent = sqs.send_message(QueueUrl=src_url, MessageBody="poison", MessageAttributes=attrs)
    for _ in range(5):
        r = sqs.receive_message(QueueUrl=src_url, WaitTimeSeconds=1, VisibilityTimeout=0)
        check(len(r.get("Messages", [])) == 1, "C: receive from source")
    r = sqs.receive_message(QueueUrl=src_url, WaitTimeSeconds=1)
    check(not r.get("Messages"), "C: 6th receive finds nothing (moved to DLQ by redrive policy)")
    dl = receive_all(dlq_url, 1)
    check(len(dl) == 1 and dl[0]["MessageId"] == sent["MessageId"],
          "C: message is in DLQ with the same MessageId")
    print(f"     C: in DLQ: DeadLetterQueueSourceArn={dl[0]['Attributes'].get('DeadLetterQueueSourceArn')} "
          f"ApproximateReceiveCount={dl[0]['Attributes']['ApproximateReceiveCount']}")
    sqs.change_message_visibility(QueueUrl=dlq_url, ReceiptHandle=dl[0]["ReceiptHandle"],
                                  VisibilityTimeout=0)
    h = sqs.start_message_move_task(SourceArn=dlq_arn, MaxNumberOfMessagesPerSecond=50)[
        "TaskHandle"]
    t = wait_move_task(dlq_arn, h)
    check(t["Status"] == "COMPLETED", f"C: redrive without DestinationArn -> {t['Status']}")
    got = receive_all(src_url, 1)
    check(len(got) == 1, "C: message back in source queue")
    m = got[0]
    check(m.get("MessageAttributes") == attrs, "C: message attributes preserved")
    print(f"     C: MessageId kept={m['MessageId'] == sent['MessageId']} "
          f"SentTimestamp kept={m['Attributes']['SentTimestamp'] == dl[0]['Attributes']['SentTimestamp']} "
          f"ApproximateReceiveCount={m['Attributes']['ApproximateReceiveCount']}")
    # How many more receives until the redriven message is dead-lettered again?
    sqs.change_message_visibility(QueueUrl=src_url, ReceiptHandle=m["ReceiptHandle"],
                                  VisibilityTimeout=0)
    n = 0
    while sqs.receive_message(QueueUrl=src_url, WaitTimeSeconds=1, VisibilityTimeout=0).get(
            "Messages"):
        n += 1
        check(n < 20, "C: redriven message is eventually dead-lettered again")
    print(f"     C: after redrive it was delivered {n + 1} more times before going back to the "
          f"DLQ (DLQ now holds {count(dlq_url)})")

    # D: SourceArn that is not a DLQ is rejected.
    try:
        sqs.start_message_move_task(SourceArn=src_arn)
        check(False, "D: non-DLQ SourceArn rejected")
    except sqs.exceptions.ClientError as e:
        check(True, f"D: non-DLQ SourceArn rejected: {e.response['Error']['Code']}")


def batch_and_visibility_checks() -> None:
    url, _ = make_queue("smoke-work", VisibilityTimeout="30")

    # ReceiveMessage long poll on an empty queue blocks for WaitTimeSeconds...
    t0 = time.monotonic()
    r = sqs.receive_message(QueueUrl=url, WaitTimeSeconds=2)
    dt = time.monotonic() - t0
    check(not r.get("Messages") and 1.8 <= dt < 4, f"long poll on empty queue waited {dt:.2f}s")

    # ...and returns early when a message arrives.
    threading.Timer(1.0, lambda: sqs.send_message(QueueUrl=url, MessageBody="late")).start()
    t0 = time.monotonic()
    r = sqs.receive_message(QueueUrl=url, WaitTimeSeconds=10)
    dt = time.monotonic() - t0
    check(len(r.get("Messages", [])) == 1 and dt < 5, f"long poll woke after {dt:.2f}s on send")
    sqs.delete_message(QueueUrl=url, ReceiptHandle=r["Messages"][0]["ReceiptHandle"])

    res = sqs.send_message_batch(
        QueueUrl=url,
        Entries=[{"Id": str(i), "MessageBody": f"m{i}",
                  "MessageAttributes": {"i": {"DataType": "Number", "StringValue": str(i)}}}
                 for i in range(10)],
    )
    check(len(res.get("Successful", [])) == 10 and not res.get("Failed"),
          "SendMessageBatch: 10 successful")

    msgs = receive_all(url, 10)
    check(len(msgs) == 10, f"received {len(msgs)}/10 batch messages")
    check(sorted(int(m["MessageAttributes"]["i"]["StringValue"]) for m in msgs) == list(range(10)),
          "batch message attributes intact")
    r = sqs.receive_message(QueueUrl=url, WaitTimeSeconds=1)
    check(not r.get("Messages"), "in-flight messages are invisible")

    # ChangeMessageVisibility: 0 makes a message visible again at once.
    first = msgs[0]
    sqs.change_message_visibility(QueueUrl=url, ReceiptHandle=first["ReceiptHandle"],
                                  VisibilityTimeout=0)
    r = sqs.receive_message(QueueUrl=url, WaitTimeSeconds=2, AttributeNames=["All"])
    again = r.get("Messages", [])
    check(len(again) == 1 and again[0]["MessageId"] == first["MessageId"],
          "ChangeMessageVisibility(0) -> message re-delivered")
    check(again[0]["Attributes"]["ApproximateReceiveCount"] == "2", "receive count now 2")
    # Extending visibility with the new receipt handle keeps it hidden.
    sqs.change_message_visibility(QueueUrl=url, ReceiptHandle=again[0]["ReceiptHandle"],
                                  VisibilityTimeout=60)
    r = sqs.receive_message(QueueUrl=url, WaitTimeSeconds=1)
    check(not r.get("Messages"), "ChangeMessageVisibility(60) keeps it hidden")
    # Stale receipt handle after re-delivery: report what LocalStack does.
    try:
        sqs.change_message_visibility(QueueUrl=url, ReceiptHandle=first["ReceiptHandle"],
                                      VisibilityTimeout=10)
        print("     stale receipt handle on ChangeMessageVisibility: accepted")
    except sqs.exceptions.ClientError as e:
        print(f"     stale receipt handle on ChangeMessageVisibility: {e.response['Error']['Code']}")

    handles = [again[0]["ReceiptHandle"]] + [m["ReceiptHandle"] for m in msgs[1:]]
    res = sqs.delete_message_batch(
        QueueUrl=url, Entries=[{"Id": str(i), "ReceiptHandle": h} for i, h in enumerate(handles)]
    )
    check(len(res.get("Successful", [])) == 10 and not res.get("Failed"),
          "DeleteMessageBatch: 10 successful")
    check(count(url) == 0, "queue empty after DeleteMessageBatch")


def main() -> None:
    print(f"endpoint {ENDPOINT}")
    try:
        redrive_checks()
        batch_and_visibility_checks()
    finally:
        for url in created:
            try:
                sqs.delete_queue(QueueUrl=url)
            except Exception:  # noqa: BLE001 - best-effort cleanup
                pass
    print("smoke check passed")


if __name__ == "__main__":
    main()
