"""The engine's counts of how attempts and jobs ended (app/metrics.py), each counted
only when the outcome was written (``took``): a zombie's refused write counts nothing."""

from __future__ import annotations

import time

from app import metrics
from app.store.records import Job


def ran(job: Job, outcome: str, started: float, took: bool) -> bool:
    """Count an attempt's run time (``started``: time.monotonic()); returns ``took``."""
    if took:
        metrics.observe(
            metrics.RUN_TIME, time.monotonic() - started, kind=job.kind, outcome=outcome
        )
    return took


def ended(job: Job, outcome: str, took: bool, started: float | None = None) -> bool:
    """Count a job's end: its outcome, its submit-to-done time and, when it ran, the
    attempt's run time. Returns ``took``."""
    if not took:
        return took
    metrics.count(metrics.COMPLETIONS, kind=job.kind, outcome=outcome)
    metrics.observe(
        metrics.SUBMIT_TO_DONE,
        time.time() - job.created_at.timestamp(),
        kind=job.kind,
        outcome=outcome,
    )
    if started is not None:
        ran(job, outcome, started, took)
    return took
