"""How the workers and the sweeper take and keep work: the local event source's batches
and polls, the function's time limit and hand-back, the outbox, the sweeper's intervals
and the wake-ups' grace. A part of ``app.settings.config.Settings``."""

from __future__ import annotations

import os
import socket

from pydantic import Field
from pydantic_settings import BaseSettings

from app.settings import aws_limits as limits
from app.settings.shared import SHARED


class WorkerSettings(BaseSettings):
    """How the workers and the sweeper take and keep work."""

    # The local event source (what Lambda's event source mapping does on AWS).
    batch_size: int = Field(
        SHARED["batch_size"],
        ge=1,
        le=limits.MAX_BATCH,
        description="messages a worker receives and runs per batch (the event source mapping's batch size on AWS)",
    )
    wait_time_seconds: int = Field(
        20,
        ge=0,
        le=limits.MAX_WAIT_SECONDS,
        description="the local event source's long poll on an empty queue",
    )
    function_timeout_seconds: int = Field(
        900,
        ge=1,
        le=limits.MAX_LAMBDA_TIMEOUT_SECONDS,
        description="how long one worker invocation may run (the Lambda function's timeout on AWS)",
    )
    # Hand the lease back when less than this is left of the invocation.
    handback_margin_seconds: float = Field(
        10.0,
        ge=0,
        description="a running job hands its lease back when less than this is left of the invocation",
    )
    worker_id: str = Field(
        default_factory=lambda: f"{socket.gethostname()}:{os.getpid()}",
        description="the worker's name in leases and events; unset: host name and process id",
    )
    # A drain worker (docs/howto/kind-versions.md): an older deployment's pool kept running
    # while the jobs that started on its kind versions finish. It runs only those, and
    # hands every other job (a new one, one of a kind it does not know) back at once. On
    # Lambda the alias "drain" does the same without this setting.
    worker_drain: bool = Field(
        False,
        description="run only jobs that started on a version of their kind this worker serves (an old pool kept while its jobs drain)",
    )

    # Workers' rows (docs/explain/design.md#workers): one UPSERT per interval, not per job.
    worker_heartbeat_seconds: float = Field(
        10.0,
        gt=0,
        le=3600,
        description="a long-running worker process writes its row (last seen, jobs running) this often",
    )
    worker_gone_seconds: float = Field(
        60.0,
        gt=0,
        le=86_400,
        description="a worker process not seen for this long is shown as gone (a Lambda environment as idle); above TASKLEASE_WORKER_HEARTBEAT_SECONDS",
    )

    # Outbox relay and sweeper.
    outbox_grace_seconds: float = Field(
        5.0,
        ge=0,
        description="an outbox row unsent this long after its commit is sent by the sweeper (keep it above 0.1 s: a long-running API marks its sent rows that long after sending them, and the relay would send those again)",
    )
    sweep_interval_seconds: float = Field(
        5.0, gt=0, description="the sweeper's pause between passes"
    )
    # A queued/retrying/stalled job that saw no change for this long gets a new message.
    lost_message_seconds: float = Field(
        900.0,
        gt=0,
        description="a queued, retrying or stalled job that saw no change for this long gets a new message",
    )
    # Look into the DLQ (receive its messages) at most this often across all sweepers, and
    # only when it holds messages the database does not account for (
    # docs/explain/design.md#dead-letters).
    dlq_scan_interval_seconds: float = Field(
        300.0,
        ge=1,
        le=86_400,
        description="the DLQ is received from at most this often across all sweepers, and only when it holds messages the database does not account for",
    )
    # Waits (docs/explain/design.md#timers): a wake-up due within this many seconds is sent
    # with SQS's DelaySeconds (at most 15 minutes); a later one is sent by the sweeper
    # once it is that close. Tests shorten it to cross the cap without waiting 15 min.
    max_message_delay_seconds: int = Field(
        limits.MAX_DELAY_SECONDS,
        ge=0,
        le=limits.MAX_DELAY_SECONDS,
        description="a wake-up due within this many seconds is sent with the queue's delay (SQS: 15 minutes at most); a later one is sent by the sweeper once it is that close",
    )
    # A wake-up still not acted on this long after it was due is presumed lost: re-sent.
    wake_grace_seconds: float = Field(
        60.0,
        gt=0,
        le=86_400,
        description="a wake-up not acted on this long after it was due is presumed lost and sent again",
    )
