"""Job kinds: the registry, payload validation, and the deterministic fake model."""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path
from typing import Any

import pytest

from app import config, errors, kinds
from app.kinds import providers

pytestmark = [pytest.mark.unit, pytest.mark.usefixtures("clean_env")]

TICKET = {"ticket_id": "T-1", "subject": "Refund please", "body": "I was charged twice."}


def fake(log: Path | None = None, **overrides: Any) -> providers.FakeProvider:
    settings = config.load(
        fake_model_latency_ms=0, fake_model_log=str(log) if log else None, **overrides
    )
    return providers.FakeProvider(settings)


def triage(
    model: providers.FakeProvider, subject: str, key: str = "job-1:triage"
) -> dict[str, Any]:
    return asyncio.run(
        model.triage(subject=subject, body="I was charged twice.", idempotency_key=key)
    )


# --- the registry -----------------------------------------------------------------


def test_the_builtin_kinds_are_registered() -> None:
    assert {"support.triage", "demo.sleep", "demo.flaky", "demo.noop"} <= set(kinds.REGISTRY)
    for name, kind in kinds.REGISTRY.items():
        assert kind.name == name
        assert kind.description


def test_an_unknown_kind_is_a_bad_request_naming_it_and_the_known_kinds() -> None:
    with pytest.raises(errors.BadRequest) as caught:
        kinds.get("no.such.kind")
    message = str(caught.value)
    assert "'no.such.kind'" in message
    assert "support.triage" in message
    assert "demo.noop" in message


def test_registering_a_kind_twice_is_refused() -> None:
    with pytest.raises(RuntimeError, match="registered twice"):
        kinds.register(kinds.REGISTRY["demo.noop"])


def test_triage_has_a_timeout_within_the_visibility_cap() -> None:
    from app import aws_limits as limits

    timeout = kinds.get("support.triage").timeout_seconds
    assert timeout is not None
    assert 1 <= timeout <= limits.MAX_VISIBILITY_SECONDS


# --- payloads ---------------------------------------------------------------------


def test_a_valid_ticket_parses() -> None:
    parsed = kinds.get("support.triage").parse(TICKET)
    assert parsed.model_dump(exclude_unset=True) == TICKET


@pytest.mark.parametrize(
    ("kind", "payload", "field"),
    [
        ("support.triage", {"ticket_id": "T-1", "body": "b"}, "payload.subject"),
        ("support.triage", {**TICKET, "subject": ""}, "payload.subject"),
        ("support.triage", {**TICKET, "customer_email": "not-an-email"}, "payload.customer_email"),
        ("support.triage", {**TICKET, "priority": "high"}, "payload.priority"),
        ("demo.sleep", {"seconds": -1}, "payload.seconds"),
        ("demo.sleep", {"steps": 0}, "payload.steps"),
        ("demo.flaky", {"fail_attempts": "many"}, "payload.fail_attempts"),
        ("demo.flaky", ["not", "an", "object"], "payload.(root)"),
    ],
)
def test_a_bad_payload_is_a_bad_request_naming_the_field(
    kind: str, payload: Any, field: str
) -> None:
    with pytest.raises(errors.BadRequest) as caught:
        kinds.get(kind).parse(payload)
    message = str(caught.value)
    assert field in message
    assert repr(kind) in message


def test_every_wrong_field_is_named_at_once() -> None:
    with pytest.raises(errors.BadRequest) as caught:
        kinds.get("support.triage").parse({"ticket_id": "T-1"})
    assert "payload.subject" in str(caught.value)
    assert "payload.body" in str(caught.value)


# --- the fake model ---------------------------------------------------------------


def test_the_fake_model_is_deterministic(tmp_path: Path) -> None:
    first = triage(fake(), "Refund please", key="a:triage")
    again = triage(fake(), "Refund please", key="b:triage")
    assert first == again
    assert first["category"] == "billing"
    assert first["priority"] == "normal"
    assert "Refund please" in first["draft_reply"]


@pytest.mark.parametrize(
    ("subject", "category", "priority"),
    [
        ("App crash on start", "bug", "normal"),
        ("Cannot login, urgent", "account", "high"),
        ("Please add dark mode", "feature_request", "normal"),
        ("Hello", "other", "normal"),
    ],
)
def test_the_fake_model_classifies_by_keywords(subject: str, category: str, priority: str) -> None:
    answer = providers.FakeProvider.answer(subject, "")
    assert (answer["category"], answer["priority"]) == (category, priority)
    assert answer["category"] in providers.CATEGORIES


def test_a_transient_tag_fails_the_first_call_then_succeeds() -> None:
    model = fake()
    with pytest.raises(providers.TransientModelError):
        triage(model, "Refund [transient]")
    assert triage(model, "Refund [transient]")["category"] == "billing"


def test_a_transient_failure_is_retryable_not_permanent() -> None:
    assert issubclass(providers.TransientModelError, errors.JobError)
    assert not issubclass(providers.TransientModelError, errors.PermanentError)


def test_a_transient_n_tag_fails_the_first_n_calls_for_that_key() -> None:
    model = fake()
    for _ in range(2):
        with pytest.raises(providers.TransientModelError):
            triage(model, "Refund [transient:2]")
    assert triage(model, "Refund [transient:2]")["category"] == "billing"
    # Another key has its own count.
    with pytest.raises(providers.TransientModelError):
        triage(model, "Refund [transient:2]", key="job-2:triage")


def test_a_permanent_tag_fails_every_call() -> None:
    model = fake()
    for _ in range(3):
        with pytest.raises(errors.PermanentError, match="permanent"):
            triage(model, "Refund [permanent]")


def test_every_call_is_appended_to_the_call_log(tmp_path: Path) -> None:
    log = tmp_path / "calls.jsonl"
    model = fake(log)
    with pytest.raises(providers.TransientModelError):
        triage(model, "Refund [transient]")
    triage(model, "Refund [transient]")
    with pytest.raises(errors.PermanentError):
        triage(model, "Refund [permanent]", key="job-9:triage")
    lines = [json.loads(line) for line in log.read_text().splitlines()]
    assert [(c["key"], c["outcome"]) for c in lines] == [
        ("job-1:triage", "transient"),
        ("job-1:triage", "ok"),
        ("job-9:triage", "permanent"),
    ]
    assert all(c["pid"] == os.getpid() and c["at"] for c in lines)


def test_the_call_log_counts_calls_across_providers_like_across_processes(tmp_path: Path) -> None:
    """A retry in another worker process must not fail again on a [transient] tag."""
    log = tmp_path / "calls.jsonl"
    with pytest.raises(providers.TransientModelError):
        triage(fake(log), "Refund [transient]")
    assert triage(fake(log), "Refund [transient]")["category"] == "billing"
    # Without the shared log each provider counts only its own calls.
    with pytest.raises(providers.TransientModelError):
        triage(fake(), "Refund [transient]")


def test_no_call_log_is_written_when_none_is_configured(tmp_path: Path) -> None:
    model = fake()
    triage(model, "Refund")
    assert model.log_path is None
    assert list(tmp_path.iterdir()) == []


def test_injected_rates_fail_every_call_at_rate_one() -> None:
    with pytest.raises(errors.PermanentError, match="injected"):
        triage(fake(fake_model_permanent_rate=1.0), "Refund")
    with pytest.raises(providers.TransientModelError, match="injected"):
        triage(fake(fake_model_transient_rate=1.0), "Refund")


def test_build_picks_the_fake_by_default_and_openai_when_asked() -> None:
    assert isinstance(providers.build(config.load()), providers.FakeProvider)
    openai = providers.build(
        config.load(model_provider="openai", openai_base_url="http://127.0.0.1:9/v1/")
    )
    assert isinstance(openai, providers.OpenAICompatibleProvider)
    assert openai.base_url == "http://127.0.0.1:9/v1"
