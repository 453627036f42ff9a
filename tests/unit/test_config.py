"""app.settings.config.load(): bad values fail at start-up, naming the TASKLEASE_* variable and the limit."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from app import errors
from app.demos.triage import settings as triage_settings
from app.settings import aws_limits as limits
from app.settings import config

pytestmark = [pytest.mark.unit, pytest.mark.usefixtures("clean_env")]


def load_error(
    monkeypatch: pytest.MonkeyPatch, load: Callable[[], object] = config.load, **env: str
) -> str:
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    with pytest.raises(errors.ConfigError) as caught:
        load()
    return str(caught.value)


def test_the_demos_settings_are_not_tasklease_s() -> None:
    """The triage demo's model and webhook settings live with the demo."""
    assert not {"model_provider", "openai_base_url", "fake_model_latency_ms", "webhook_url"} & set(
        config.Settings.model_fields
    )
    assert "fake_model_latency_ms" in triage_settings.TriageSettings.model_fields


def test_defaults_load_and_keep_the_redrive_backstop_above_the_attempt_budget() -> None:
    s = config.load()
    assert s.max_receive_count > s.max_attempts
    assert 1 <= s.batch_size <= limits.MAX_BATCH


def test_environment_values_are_read_with_the_prefix(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TASKLEASE_VISIBILITY_TIMEOUT_SECONDS", "120")
    monkeypatch.setenv("TASKLEASE_BATCH_SIZE", "3")
    s = config.load()
    assert (s.visibility_timeout_seconds, s.batch_size) == (120, 3)


@pytest.mark.parametrize(
    ("variable", "value", "limit"),
    [
        ("TASKLEASE_VISIBILITY_TIMEOUT_SECONDS", "99999999", str(limits.MAX_VISIBILITY_SECONDS)),
        ("TASKLEASE_VISIBILITY_TIMEOUT_SECONDS", "0", "1"),
        ("TASKLEASE_BATCH_SIZE", "11", str(limits.MAX_BATCH)),
        ("TASKLEASE_BATCH_SIZE", "0", "1"),
        ("TASKLEASE_WAIT_TIME_SECONDS", "21", str(limits.MAX_WAIT_SECONDS)),
        ("TASKLEASE_MAX_RECEIVE_COUNT", "1001", str(limits.MAX_RECEIVE_COUNT)),
        ("TASKLEASE_FUNCTION_TIMEOUT_SECONDS", "901", str(limits.MAX_LAMBDA_TIMEOUT_SECONDS)),
        ("TASKLEASE_MESSAGE_RETENTION_SECONDS", "59", str(limits.MIN_RETENTION_SECONDS)),
        ("TASKLEASE_DLQ_SCAN_INTERVAL_SECONDS", "0.5", "1"),
        ("TASKLEASE_DLQ_SCAN_INTERVAL_SECONDS", "86401", "86400"),
    ],
)
def test_an_out_of_range_value_is_refused_naming_the_variable_and_its_limit(
    monkeypatch: pytest.MonkeyPatch, variable: str, value: str, limit: str
) -> None:
    message = load_error(monkeypatch, **{variable: value})
    assert variable in message
    assert limit in message


def test_a_value_that_is_not_a_number_is_refused_naming_the_variable(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    message = load_error(monkeypatch, TASKLEASE_BATCH_SIZE="ten")
    assert "TASKLEASE_BATCH_SIZE" in message
    assert "integer" in message


@pytest.mark.parametrize(("receive_count", "attempts"), [("5", "5"), ("3", "5")])
def test_max_receive_count_at_or_below_max_attempts_is_refused(
    monkeypatch: pytest.MonkeyPatch, receive_count: str, attempts: str
) -> None:
    message = load_error(
        monkeypatch, TASKLEASE_MAX_RECEIVE_COUNT=receive_count, TASKLEASE_MAX_ATTEMPTS=attempts
    )
    assert "TASKLEASE_MAX_RECEIVE_COUNT" in message
    assert "TASKLEASE_MAX_ATTEMPTS" in message
    assert "must be above" in message


def test_max_receive_count_just_above_max_attempts_is_accepted(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("TASKLEASE_MAX_RECEIVE_COUNT", "6")
    monkeypatch.setenv("TASKLEASE_MAX_ATTEMPTS", "5")
    assert config.load().max_receive_count == 6


def test_the_openai_provider_without_a_base_url_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    message = load_error(monkeypatch, triage_settings.load, TASKLEASE_MODEL_PROVIDER="openai")
    assert "TASKLEASE_OPENAI_BASE_URL" in message
    assert "TASKLEASE_MODEL_PROVIDER" in message


def test_the_openai_provider_with_a_base_url_is_accepted(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TASKLEASE_MODEL_PROVIDER", "openai")
    monkeypatch.setenv("TASKLEASE_OPENAI_BASE_URL", "http://127.0.0.1:9/v1")
    assert triage_settings.load().openai_base_url == "http://127.0.0.1:9/v1"


def test_an_unknown_model_provider_is_refused_naming_the_choices(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    message = load_error(monkeypatch, triage_settings.load, TASKLEASE_MODEL_PROVIDER="anthropic")
    assert "TASKLEASE_MODEL_PROVIDER" in message
    assert "'fake'" in message
    assert "'openai'" in message


@pytest.mark.parametrize(
    ("env", "named"),
    [
        (
            {"TASKLEASE_BACKOFF_BASE_SECONDS": "10", "TASKLEASE_BACKOFF_CAP_SECONDS": "5"},
            "TASKLEASE_BACKOFF_CAP_SECONDS",
        ),
        (
            {
                "TASKLEASE_MESSAGE_RETENTION_SECONDS": "7200",
                "TASKLEASE_DLQ_RETENTION_SECONDS": "3600",
            },
            "TASKLEASE_DLQ_RETENTION_SECONDS",
        ),
        (
            {"TASKLEASE_POOL_MIN_SIZE": "5", "TASKLEASE_POOL_MAX_SIZE": "2"},
            "TASKLEASE_POOL_MIN_SIZE",
        ),
    ],
)
def test_incoherent_pairs_of_settings_are_refused_naming_the_variable(
    monkeypatch: pytest.MonkeyPatch, env: dict[str, str], named: str
) -> None:
    assert named in load_error(monkeypatch, **env)


def test_every_problem_is_reported_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    message = load_error(monkeypatch, TASKLEASE_BATCH_SIZE="11", TASKLEASE_WAIT_TIME_SECONDS="99")
    assert "TASKLEASE_BATCH_SIZE" in message
    assert "TASKLEASE_WAIT_TIME_SECONDS" in message


def test_need_names_every_missing_variable() -> None:
    s = config.load(database_url="postgresql://localhost/x")
    with pytest.raises(errors.ConfigError) as caught:
        s.need("database_url", "queue_url", "dlq_url")
    message = str(caught.value)
    assert "TASKLEASE_QUEUE_URL" in message
    assert "TASKLEASE_DLQ_URL" in message
    assert "TASKLEASE_DATABASE_URL" not in message


def test_need_passes_when_everything_is_set() -> None:
    s = config.load(
        database_url="postgresql://localhost/x", queue_url="http://q", dlq_url="http://d"
    )
    s.need("database_url", "queue_url", "dlq_url")
    assert (s.database_url, s.queue, s.dlq) == ("postgresql://localhost/x", "http://q", "http://d")


def test_the_endpoint_properties_name_their_variable_when_unset() -> None:
    s = config.load()
    with pytest.raises(errors.ConfigError, match="TASKLEASE_QUEUE_URL"):
        _ = s.queue


def test_the_openai_api_key_is_kept_out_of_the_settings_repr(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("TASKLEASE_OPENAI_API_KEY", "sk-do-not-print")
    s = triage_settings.load()
    assert s.openai_api_key == "sk-do-not-print"
    assert "sk-do-not-print" not in repr(s)
