"""The worker function's memory against what ``make cost`` measured: each kind's peak
resident memory in a fresh worker process (bench/cost_memory.py), plus what that process
lacks of a Lambda execution environment, with headroom. ``tasklease cost`` prints, per
profile, whether the profile's worker memory covers it; the small profile's 256 MB is
chosen from it (tests/unit/test_cost_memory.py fails when it no longer does).

Lambda reports ``Max Memory Used`` for the execution environment; the Python runtime
runs the handler in its own process, which is the process measured. What the bench's
process does not hold and an execution environment does: the runtime interface client
(``awslambdaric``, in the same process on AWS) and its HTTP client for the Runtime API:
``RUNTIME_SHARE_MB``, an allowance, not a measurement. ``HEADROOM`` covers what the
bench does not exercise: payloads and results larger than its ticket (tens of bytes), a
model provider's SDK and its responses, the heap's growth over an execution
environment's many invocations of several kinds (each kind is measured in its own fresh
process).
"""

from __future__ import annotations

import math
from typing import Any

RUNTIME_SHARE_MB = 32
HEADROOM = 1.5


def needed_mb(peak_rss_mb: float) -> int:
    """The least worker memory a kind whose measured peak is ``peak_rss_mb`` may have."""
    return math.ceil((peak_rss_mb + RUNTIME_SHARE_MB) * HEADROOM)


def worker_memory(figures: dict[str, Any], memory_mb: int) -> dict[str, Any]:
    """Each kind's measured peak and the memory it needs; whether ``memory_mb`` (the
    worker function's, in the profile priced) covers the most any kind needs."""
    peaks = {kind: fig["worker_memory"]["peak_rss_mb"] for kind, fig in figures["kinds"].items()}
    needs = {kind: needed_mb(peak) for kind, peak in peaks.items()}
    need = max(needs.values())
    return {
        "worker_memory_mb": memory_mb,
        "peak_rss_mb_by_kind": peaks,
        "needed_mb_by_kind": needs,
        "needed_mb": need,
        "runtime_share_mb": RUNTIME_SHARE_MB,
        "headroom": HEADROOM,
        "enough": memory_mb >= need,
        "rule": f"(peak resident memory + {RUNTIME_SHARE_MB} MB for the Lambda runtime's own "
        f"share) x {HEADROOM:g} headroom, rounded up; the most any kind needs",
    }
