"""Retry delays: exponential with full jitter, capped.

https://aws.amazon.com/blogs/architecture/exponential-backoff-and-jitter/
"""

from __future__ import annotations

import random

from app.settings import aws_limits as limits


def full_jitter(
    attempt: int, *, base: float, cap: float, rng: random.Random | None = None
) -> float:
    """A delay in [0, min(cap, base * 2**(attempt-1))] seconds, never past SQS's visibility cap."""
    ceiling = min(cap, base * 2 ** max(0, attempt - 1), limits.MAX_VISIBILITY_SECONDS)
    return (rng or random).uniform(0, ceiling)


def equal_jitter(seconds: float, rng: random.Random | None = None) -> float:
    """A delay in [seconds/2, seconds]: spread out, never much shorter than asked."""
    return (rng or random).uniform(seconds / 2, seconds)
