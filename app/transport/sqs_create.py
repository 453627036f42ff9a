"""Making a deployment's queues on SQS: the three source queues (one per priority) and
their dead-letter queues, each DLQ its source's redrive target and open to it alone."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from app import errors
from app.priorities import ORDER, Priority
from app.settings import aws_limits as limits
from app.transport.base import QueueUrls

if TYPE_CHECKING:
    from app.transport.sqs import SqsTransport


async def create_queues(t: SqsTransport, name: str) -> QueueUrls:
    """Create (or find) the three source queues (``name``, ``name-high``, ``name-low``)
    and their DLQs (each ``-dlq``), each DLQ its source's redrive target and open to
    that source alone."""
    longest = f"{name}-{Priority.HIGH}-dlq"
    if len(longest) > limits.MAX_QUEUE_NAME_CHARS:
        room = limits.MAX_QUEUE_NAME_CHARS - len(longest) + len(name)
        raise errors.ConfigError(
            f"queue name {name!r} is too long: {longest!r} must fit SQS's "
            f"{limits.MAX_QUEUE_NAME_CHARS} characters, so at most {room} for the name"
        )
    made = {
        p: await _create_pair(t, name if p == Priority.NORMAL else f"{name}-{p}") for p in ORDER
    }
    return QueueUrls(
        queue_url=made[Priority.NORMAL][0],
        dlq_url=made[Priority.NORMAL][1],
        queue_url_high=made[Priority.HIGH][0],
        dlq_url_high=made[Priority.HIGH][1],
        queue_url_low=made[Priority.LOW][0],
        dlq_url_low=made[Priority.LOW][1],
    )


async def _create_pair(t: SqsTransport, name: str) -> tuple[str, str]:
    """One source queue and its DLQ, with the redrive policy."""
    s = t.settings
    dlq = await t._call(
        "create_queue",
        QueueName=f"{name}-dlq",
        Attributes={"MessageRetentionPeriod": str(s.dlq_retention_seconds)},
    )
    dlq_url = str(dlq["QueueUrl"])
    dlq_arn = await t.queue_arn(dlq_url)
    src = await t._call(
        "create_queue",
        QueueName=name,
        Attributes={
            "VisibilityTimeout": str(s.visibility_timeout_seconds),
            "MessageRetentionPeriod": str(s.message_retention_seconds),
            "RedrivePolicy": json.dumps(
                {"deadLetterTargetArn": dlq_arn, "maxReceiveCount": s.max_receive_count}
            ),
        },
    )
    src_url = str(src["QueueUrl"])
    src_arn = await t.queue_arn(src_url)
    await t._call(
        "set_queue_attributes",
        QueueUrl=dlq_url,
        Attributes={
            "RedriveAllowPolicy": json.dumps(
                {"redrivePermission": "byQueue", "sourceQueueArns": [src_arn]}
            )
        },
    )
    return src_url, dlq_url
