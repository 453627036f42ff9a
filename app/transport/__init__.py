"""The carrier of job wake-ups: the only package that talks to SQS (boto3, botocore,
aiobotocore) or Redis (redis-py). Callers hold a ``Transport`` and open it with ``connect``::

    async with transport.connect(settings) as t:
        await t.send_jobs(job_ids)

``base`` is the contract, ``codec`` the claim-check messages every carrier moves, and one
module per carrier implements the contract (``sqs`` and ``redis_streams``;
``TASKLEASE_TRANSPORT`` picks).
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

from app.settings.config import Settings
from app.transport.base import Message, QueueUrls, Transport

__all__ = ["Message", "QueueUrls", "Transport", "connect", "create"]


def create(settings: Settings) -> Transport:
    """The carrier settings.transport names, not yet open."""
    # Imported here so that a deployment on another carrier never imports aiobotocore.
    # Settings.transport admits only the carriers that exist.
    if settings.transport == "redis":
        from app.transport.redis_streams import RedisTransport

        return RedisTransport(settings)
    from app.transport.sqs import SqsTransport

    return SqsTransport(settings)


@contextlib.asynccontextmanager
async def connect(settings: Settings) -> AsyncIterator[Transport]:
    """An open carrier for the block, closed however the block ends."""
    carrier = create(settings)
    await carrier.open()
    try:
        yield carrier
    finally:
        await carrier.close()
