"""Retry delays: exponential with full jitter, capped, never past SQS's 12-hour visibility cap."""

from __future__ import annotations

import random

import pytest

from app.settings import aws_limits as limits
from app.worker import backoff

pytestmark = pytest.mark.unit


class Highest(random.Random):
    """Always the top of the range: shows the ceiling full_jitter asks for."""

    def uniform(self, a: float, b: float) -> float:
        return b


class Lowest(random.Random):
    def uniform(self, a: float, b: float) -> float:
        return a


@pytest.mark.parametrize(
    ("attempt", "base", "cap", "ceiling"),
    [
        (1, 2.0, 300.0, 2.0),
        (2, 2.0, 300.0, 4.0),
        (3, 2.0, 300.0, 8.0),
        (8, 2.0, 300.0, 256.0),
        (9, 2.0, 300.0, 300.0),  # 512 capped
        (50, 2.0, 300.0, 300.0),
        (0, 2.0, 300.0, 2.0),  # attempt 0 is treated as the first
    ],
)
def test_the_ceiling_is_base_times_two_to_the_attempt_minus_one_capped(
    attempt: int, base: float, cap: float, ceiling: float
) -> None:
    assert backoff.full_jitter(attempt, base=base, cap=cap, rng=Highest()) == ceiling
    assert backoff.full_jitter(attempt, base=base, cap=cap, rng=Lowest()) == 0


@pytest.mark.parametrize("attempt", [1, 2, 3, 5, 10, 20])
def test_every_delay_stays_within_zero_and_the_ceiling(attempt: int) -> None:
    rng = random.Random(attempt)
    ceiling = min(30.0, 0.5 * 2 ** (attempt - 1))
    delays = [backoff.full_jitter(attempt, base=0.5, cap=30.0, rng=rng) for _ in range(2000)]
    assert all(0 <= d <= ceiling for d in delays)


def test_the_jitter_is_full_not_equal_delays_spread_over_the_whole_range() -> None:
    rng = random.Random(7)
    delays = [backoff.full_jitter(6, base=1.0, cap=300.0, rng=rng) for _ in range(2000)]
    ceiling = 32.0
    assert min(delays) < ceiling * 0.1
    assert max(delays) > ceiling * 0.9
    assert len(set(delays)) > 1900


def test_a_huge_cap_and_attempt_never_exceed_the_sqs_visibility_cap() -> None:
    assert limits.MAX_VISIBILITY_SECONDS == 12 * 3600
    top = backoff.full_jitter(200, base=60.0, cap=10**9, rng=Highest())
    assert top == limits.MAX_VISIBILITY_SECONDS
    rng = random.Random(1)
    assert all(
        backoff.full_jitter(n, base=3600.0, cap=10**9, rng=rng) <= limits.MAX_VISIBILITY_SECONDS
        for n in range(1, 100)
    )


def test_without_an_rng_the_module_random_is_used_and_stays_in_range() -> None:
    delays = [backoff.full_jitter(3, base=1.0, cap=10.0) for _ in range(200)]
    assert all(0 <= d <= 4.0 for d in delays)
