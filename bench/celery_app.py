"""The Celery peer's app: ``celery -A bench.celery_app worker``. Configured by the
environment that bench/celery_peer.py sets: the broker URL and the queue name."""

from __future__ import annotations

import os

from celery import Celery

BROKER = os.environ.get("BENCH_CELERY_BROKER", "redis://127.0.0.1:6379/15")
QUEUE = os.environ.get("BENCH_CELERY_QUEUE", "bench-celery")

app = Celery("bench", broker=BROKER)
transport: dict[str, object] = {"visibility_timeout": 30}
if BROKER.startswith("sqs://"):
    # Same long poll as tasklease's workers (TASKLEASE_WAIT_TIME_SECONDS=1), no extra sleep.
    transport |= {"region": "us-east-1", "is_secure": False, "wait_time_seconds": 1}
    transport |= {"polling_interval": 0}
app.conf.update(
    task_acks_late=True,
    worker_prefetch_multiplier=1,
    task_default_queue=QUEUE,
    task_ignore_result=True,
    broker_transport_options=transport,
    broker_connection_retry_on_startup=True,
    worker_hijack_root_logger=True,
)


@app.task(name="bench.noop")
def noop() -> dict[str, bool]:
    return {"ok": True}
