"""The Celery peer's app: ``celery -A bench.celery_app worker``. Configured by the
environment that bench/celery_peer.py sets: the broker URL, the queue name, the profile
(``strict`` or ``recommended``, below) and the file each finished task's time goes to."""

from __future__ import annotations

import os
import time
from typing import Any

from celery import Celery
from celery.signals import task_postrun

BROKER = os.environ.get("BENCH_CELERY_BROKER", "redis://127.0.0.1:6379/15")
QUEUE = os.environ.get("BENCH_CELERY_QUEUE", "bench-celery")
PROFILE = os.environ.get("BENCH_CELERY_PROFILE", "strict")
DONE_LOG = os.environ.get("BENCH_CELERY_DONE_LOG")

# Both profiles keep acks_late (the message is deleted after the task ran, so a killed
# worker's task runs again: the guarantee tasklease is compared on) and the same long poll
# as tasklease's workers (TASKLEASE_WAIT_TIME_SECONDS=1).
COMMON: dict[str, Any] = {
    "task_acks_late": True,
    "task_ignore_result": True,
    # A long poll of 1 s, as tasklease's (kombu's default is 10 s: it only changes what an
    # idle worker costs). polling_interval 0: no client-side sleep after an empty poll,
    # as kombu's SQS docs advise with long polling:
    # https://docs.celeryq.dev/projects/kombu/en/latest/reference/kombu.transport.SQS.html
    "transport": {"wait_time_seconds": 1, "polling_interval": 0, "visibility_timeout": 30},
}

PROFILES: dict[str, dict[str, Any]] = {
    # Today's peer: one task reserved at a time per process ("reserve one task at a time",
    # https://docs.celeryq.dev/en/stable/userguide/optimizing.html#reserve-one-task-at-a-time):
    # the strictest acks_late set-up, and the slowest on SQS (the README says why).
    "strict": {"worker_prefetch_multiplier": 1, "concurrency": 1},
    "recommended": {
        # "If you have lots of short tasks, and throughput/round trip latency is important
        # to you, this number should be large ... Say 64, or 128":
        # https://docs.celeryq.dev/en/stable/userguide/optimizing.html#prefetch-limits
        # On SQS, kombu asks for min(prefetch count, 10) messages per ReceiveMessage:
        # https://docs.celeryq.dev/projects/kombu/en/latest/reference/kombu.transport.SQS.html
        "worker_prefetch_multiplier": 64,
        # The prefork pool's default: one child per CPU
        # (https://docs.celeryq.dev/en/stable/userguide/workers.html#concurrency).
        "concurrency": os.cpu_count() or 1,
    },
}


def settings(profile: str) -> dict[str, Any]:
    """The profile's settings as the report shows them (Celery's names, plus -c)."""
    p = PROFILES[profile]
    return {
        "task_acks_late": COMMON["task_acks_late"],
        "worker_prefetch_multiplier": p["worker_prefetch_multiplier"],
        "worker_concurrency (-c, prefork)": p["concurrency"],
        "broker_transport_options": dict(COMMON["transport"]),
    }


app = Celery("bench", broker=BROKER)
transport: dict[str, object] = {"visibility_timeout": 30}
if BROKER.startswith("sqs://"):
    transport |= {"region": "us-east-1", "is_secure": False, **COMMON["transport"]}
app.conf.update(
    task_acks_late=COMMON["task_acks_late"],
    worker_prefetch_multiplier=PROFILES[PROFILE]["worker_prefetch_multiplier"],
    task_default_queue=QUEUE,
    task_ignore_result=COMMON["task_ignore_result"],
    broker_transport_options=transport,
    broker_connection_retry_on_startup=True,
    worker_hijack_root_logger=True,
)


@app.task(name="bench.noop")
def noop() -> dict[str, bool]:
    return {"ok": True}


@task_postrun.connect
def _finished(task_id: str | None = None, **_: Any) -> None:
    """Each task's finish time (epoch seconds), one line each: its latency is this less
    the time the benchmark sent it. Small appends to a file opened O_APPEND do not mix."""
    if DONE_LOG and task_id:
        with open(DONE_LOG, "a") as fh:
            fh.write(f"{task_id} {time.time():.6f}\n")
