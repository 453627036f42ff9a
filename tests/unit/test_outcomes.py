"""The worker's pure decisions: how long a retry waits and when a lease goes back."""

from __future__ import annotations

import time
import uuid

import pytest

from app import errors
from app.settings import aws_limits, config
from app.worker import outcomes
from app.worker.leases import Lease, time_to_hand_back

pytestmark = pytest.mark.unit

SETTINGS = config.load(backoff_base_seconds=2, backoff_cap_seconds=60)


class Remaining:
    def __init__(self, ms: int) -> None:
        self.ms = ms

    def get_remaining_time_in_millis(self) -> int:
        return self.ms


class HasADelay(Exception):
    """Not a Retry: a delay attribute alone does not pick the wait."""

    delay = 9999.0


def test_a_retry_asks_for_its_own_delay() -> None:
    assert outcomes.retry_delay(errors.Retry(delay=3.5), 1, SETTINGS) == 3.5


def test_a_retry_without_a_delay_and_any_other_error_back_off() -> None:
    for exc in (errors.Retry(), ValueError("boom"), HasADelay()):
        for attempt in (1, 5, 20):
            assert 0 <= outcomes.retry_delay(exc, attempt, SETTINGS) <= 60


def test_no_delay_passes_the_visibility_cap() -> None:
    delay = outcomes.retry_delay(errors.Retry(delay=10**9), 1, SETTINGS)
    assert delay == aws_limits.MAX_VISIBILITY_SECONDS


def lease(received_at: float) -> Lease:
    return Lease(uuid.uuid4(), uuid.uuid4(), "handle", received_at, generation=0)


def test_the_hand_back_comes_before_lambdas_time_runs_out() -> None:
    s = config.load(handback_margin_seconds=10, visibility_timeout_seconds=30)
    assert time_to_hand_back(lease(time.time()), Remaining(60_000), s) == pytest.approx(50, abs=1)


def test_without_lambda_the_twelve_hour_visibility_cap_decides() -> None:
    s = config.load(handback_margin_seconds=10, visibility_timeout_seconds=30)
    started = time.time() - (aws_limits.MAX_VISIBILITY_SECONDS - 100)
    assert time_to_hand_back(lease(started), None, s) == pytest.approx(60, abs=1)
