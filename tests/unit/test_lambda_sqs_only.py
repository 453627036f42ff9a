"""The Lambda handlers run on SQS only: a function configured for the Redis carrier fails
at its cold start, naming the variable, instead of polling nothing."""

from __future__ import annotations

import pytest

from app import errors
from handlers import runtime

pytestmark = pytest.mark.unit


def test_a_function_on_the_redis_carrier_fails_at_cold_start(
    clean_env: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TASKLEASE_TRANSPORT", "redis")
    monkeypatch.setenv("TASKLEASE_REDIS_URL", "redis://127.0.0.1:6379/0")
    with pytest.raises(errors.ConfigError, match=r"TASKLEASE_TRANSPORT=redis.*SQS only"):
        runtime.load_settings()


def test_a_function_on_sqs_starts(clean_env: None) -> None:
    assert runtime.load_settings().transport == "sqs"


def test_the_redis_carrier_without_its_url_stops_start_up(
    clean_env: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TASKLEASE_TRANSPORT", "redis")
    with pytest.raises(errors.ConfigError, match="TASKLEASE_REDIS_URL"):
        runtime.load_settings()


def test_a_redis_url_that_is_not_one_is_refused(
    clean_env: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TASKLEASE_TRANSPORT", "redis")
    monkeypatch.setenv("TASKLEASE_REDIS_URL", "http://127.0.0.1:6379")
    with pytest.raises(errors.ConfigError, match="TASKLEASE_REDIS_URL"):
        runtime.load_settings()


def test_the_streams_are_named_after_the_queue_name(
    clean_env: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    from app.settings import config

    s = config.load(transport="redis", redis_url="redis://h:6379/0", queue_name="jobs")
    assert (s.queue, s.dlq, s.queue_url_high, s.dlq_url_low) == (
        "jobs",
        "jobs-dlq",
        "jobs-high",
        "jobs-low-dlq",
    )
