"""The model providers' settings (throttles, budgets, the fake's 429s) fail at start-up
naming the variable; and a provider's Retry-After is read as seconds or an HTTP-date."""

from __future__ import annotations

import datetime as dt

import pytest

from app import errors
from app.demos import triage
from app.demos.triage.throttling import retry_after
from app.settings import config

pytestmark = [pytest.mark.unit, pytest.mark.usefixtures("clean_env")]


@pytest.mark.parametrize(
    ("variable", "value", "says"),
    [
        ("TASKLEASE_MODEL_BUDGETS", "not json", "not JSON"),
        ("TASKLEASE_MODEL_BUDGETS", '{"gpt-4o-mini": {"rpm": 5}}', "not a provider/model name"),
        ("TASKLEASE_MODEL_BUDGETS", '{"openai/gpt-4o-mini": {}}', "needs rpm, tpm or both"),
        ("TASKLEASE_MODEL_BUDGETS", '{"openai/gpt-4o-mini": {"rpm": 0}}', "greater than"),
        ("TASKLEASE_MODEL_BUDGETS", '{"openai/gpt-4o-mini": {"rps": 5}}', "rps"),
        ("TASKLEASE_MAX_THROTTLES", "0", "greater than"),
        ("TASKLEASE_THROTTLE_DELAY_SECONDS", "0", "greater than"),
        ("TASKLEASE_MAX_THROTTLE_DELAY_SECONDS", "999999", "less than"),
        ("TASKLEASE_TENANT_DAILY_TOKENS", "0", "greater than"),
        ("TASKLEASE_TENANT_BUDGET_POLICY", "sometimes", "'wait' or 'fail'"),
    ],
)
def test_a_bad_provider_setting_is_refused_at_start_up_naming_the_variable(
    monkeypatch: pytest.MonkeyPatch, variable: str, value: str, says: str
) -> None:
    monkeypatch.setenv(variable, value)
    with pytest.raises(errors.ConfigError) as caught:
        config.load()
    assert variable in str(caught.value)
    assert says in str(caught.value)


@pytest.mark.parametrize(
    ("variable", "value", "says"),
    [
        ("TASKLEASE_FAKE_MODEL_THROTTLE_RATE", "1.5", "less than"),
        ("TASKLEASE_FAKE_MODEL_RETRY_AFTER_SECONDS", "-1", "greater than"),
    ],
)
def test_a_bad_demo_model_setting_is_refused_when_its_deps_are_built_naming_the_variable(
    monkeypatch: pytest.MonkeyPatch, variable: str, value: str, says: str
) -> None:
    """The fake model's settings are the triage demo's own (app/demos/triage/settings.py),
    read when a worker builds the demo's deps at start-up."""
    monkeypatch.setenv(variable, value)
    with pytest.raises(errors.ConfigError) as caught:
        triage.build_deps(config.load())
    assert variable in str(caught.value)
    assert says in str(caught.value)


def test_budgets_are_read_from_json(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(
        "TASKLEASE_MODEL_BUDGETS", '{"openai/gpt-4o-mini": {"rpm": 500, "tpm": 200000}}'
    )
    budget = config.load().model_budgets["openai/gpt-4o-mini"]
    assert (budget.rpm, budget.tpm) == (500, 200_000)
    assert config.load(model_budgets="").model_budgets == {}


NOW = dt.datetime(2026, 12, 4, 15, 0, 0, tzinfo=dt.UTC)


@pytest.mark.parametrize(
    ("headers", "seconds"),
    [
        ({"Retry-After": "7"}, 7.0),
        ({"retry-after": "0.5"}, 0.5),
        ({"Retry-After": "Fri, 04 Dec 2026 15:00:30 GMT"}, 30.0),
        ({"Retry-After": "Fri, 04 Dec 2026 14:59:00 GMT"}, 0.0),  # past: at once
        ({"retry-after-ms": "250", "Retry-After": "9"}, 0.25),
        ({"Retry-After": "soon"}, None),
        ({"Retry-After": "-3"}, 0.0),
        ({}, None),
    ],
)
def test_retry_after_is_seconds_or_an_http_date(
    headers: dict[str, str], seconds: float | None
) -> None:
    assert retry_after(headers, now=NOW) == seconds
