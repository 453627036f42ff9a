"""The carrier of job wake-ups: the only package that talks to SQS (boto3, botocore,
aiobotocore). Callers hold a ``Transport`` and open it with ``connect``::

    async with transport.connect(settings) as t:
        await t.send_jobs(job_ids)

``base`` is the contract, ``codec`` the claim-check messages every carrier moves, and one
module per carrier implements the contract (``sqs`` today; ``TASKLEASE_TRANSPORT`` picks).
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

from app.config import Settings
from app.transport.base import Message, QueueUrls, Transport

__all__ = ["Message", "QueueUrls", "Transport", "connect", "create"]


def create(settings: Settings) -> Transport:
    """The carrier settings.transport names, not yet open."""
    # Imported here so that a deployment on another carrier never imports aiobotocore.
    # Settings.transport admits only the carriers that exist, so there is no else.
    if settings.transport == "sqs":
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
