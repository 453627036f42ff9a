"""The engine's counts of how attempts ended (app/metrics.py), each counted only when the
outcome was written (``took``): a zombie's refused write counts nothing. A job's end is
counted by the store that wrote it (app/store/endings.py), whatever path ended it."""

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
    """An attempt that ended the job: its run time, when it ran (the end itself, its
    outcome and submit-to-done time, the store counted as it wrote it). Returns ``took``."""
    if took and started is not None:
        ran(job, outcome, started, took)
    return took
