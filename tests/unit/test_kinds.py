"""The demo kinds (app.demos): the registry, payload validation, the deterministic fake
model, and each kind run in memory with tasklease.testing."""

from __future__ import annotations

import asyncio
import json
import os
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from app import errors, kinds
from app.demos.triage import TriageDeps, TriageResult, WebhookError, providers
from app.demos.triage import settings as triage_settings
from app.demos.triage import triage as triage_kind
from app.kinds.testing import run_kind
from app.settings import config

pytestmark = [pytest.mark.unit, pytest.mark.usefixtures("clean_env")]

TICKET = {"ticket_id": "T-1", "subject": "Refund please", "body": "I was charged twice."}


def fake(log: Path | None = None, **overrides: Any) -> providers.FakeProvider:
    settings = triage_settings.load(
        fake_model_latency_ms=0, fake_model_log=str(log) if log else None, **overrides
    )
    return providers.FakeProvider(settings)


def triage(
    model: providers.FakeProvider, subject: str, key: str = "job-1:triage"
) -> dict[str, Any]:
    answer, _usage = asyncio.run(
        model.triage(subject=subject, body="I was charged twice.", idempotency_key=key)
    )
    return answer


# --- the registry -----------------------------------------------------------------


def test_the_demo_kinds_are_registered() -> None:
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
    with pytest.raises(errors.ConfigError, match="registered twice"):
        kinds.register(kinds.REGISTRY["demo.noop"])


def test_triage_has_a_timeout_within_the_visibility_cap() -> None:
    from app.settings import aws_limits as limits

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
    assert isinstance(providers.build(triage_settings.load()), providers.FakeProvider)
    openai = providers.build(
        triage_settings.load(model_provider="openai", openai_base_url="http://127.0.0.1:9/v1/")
    )
    assert isinstance(openai, providers.OpenAICompatibleProvider)
    assert openai.base_url == "http://127.0.0.1:9/v1"


# --- the built-in kinds, run in memory (app.kinds.testing) ------------------------


def triage_deps(
    handler: Callable[[httpx.Request], httpx.Response] | None = None,
) -> TriageDeps:
    """The fake model without latency and, with a handler, a webhook answered in memory."""
    transport = httpx.MockTransport(handler or (lambda r: httpx.Response(200)))
    return TriageDeps(
        model=fake(),
        http=httpx.AsyncClient(transport=transport),
        webhook_url="http://hook.test/hook" if handler else None,
    )


def model_calls(deps: TriageDeps) -> int:
    assert isinstance(deps.model, providers.FakeProvider)
    return sum(deps.model._calls.values())


def test_triage_runs_in_memory_and_returns_its_declared_result() -> None:
    deps = triage_deps()
    run = asyncio.run(run_kind(triage_kind, TICKET, deps=deps))
    assert isinstance(run.result, TriageResult)
    assert run.stored == {
        "ticket_id": "T-1",
        "category": "billing",
        "priority": "normal",
        "draft_reply": run.result.draft_reply,
        "delivered": False,
    }
    assert (run.ran, run.replayed, run.attempts) == (["triage", "post"], [], 1)
    assert model_calls(deps) == 1


def test_triage_after_a_crash_past_the_model_effect_does_not_ask_the_model_again() -> None:
    deps = triage_deps()
    run = asyncio.run(run_kind(triage_kind, TICKET, deps=deps, crash_after_effect=1))
    assert run.crashed_after == "triage"
    assert run.attempts == 2
    assert run.replayed == ["triage"]
    assert run.ran == ["triage", "post"]
    assert model_calls(deps) == 1
    assert run.result.category == "billing"


def test_triage_after_a_crash_inside_the_model_effect_asks_the_model_again() -> None:
    """The one window effects cannot close: the call returned, nothing was recorded."""
    deps = triage_deps()
    run = asyncio.run(run_kind(triage_kind, TICKET, deps=deps, crash_inside_effect=1))
    assert run.crashed_after == "triage"
    assert run.ran == ["triage", "triage", "post"]
    assert run.replayed == []
    assert model_calls(deps) == 2


def test_triage_posts_to_the_webhook_with_the_effect_idempotency_key() -> None:
    seen: list[httpx.Request] = []

    def hook(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(202)

    job_id = uuid.uuid4()
    run = asyncio.run(run_kind(triage_kind, TICKET, deps=triage_deps(hook), job_id=job_id))
    assert run.result.delivered is True
    assert run.effects["post"] == {"delivered": True, "status": 202}
    assert [r.headers["idempotency-key"] for r in seen] == [f"{job_id}:post"]
    assert json.loads(seen[0].content)["ticket_id"] == "T-1"


@pytest.mark.parametrize(
    ("status", "error"), [(400, errors.PermanentError), (503, WebhookError), (429, WebhookError)]
)
def test_triage_sorts_webhook_answers_into_permanent_and_retryable(
    status: int, error: type[Exception]
) -> None:
    deps = triage_deps(lambda r: httpx.Response(status))
    with pytest.raises(error, match=str(status)):
        asyncio.run(run_kind(triage_kind, TICKET, deps=deps))


def test_triage_builds_its_own_deps_from_its_own_settings(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("TASKLEASE_WEBHOOK_URL", "http://hook.test/h")
    deps = asyncio.run(triage_kind.build_deps(config.load()))
    assert isinstance(deps, TriageDeps)
    assert isinstance(deps.model, providers.FakeProvider)
    assert deps.webhook_url == "http://hook.test/h"
    asyncio.run(deps.aclose())
    assert deps.http.is_closed


def test_demo_sleep_resumes_after_its_last_recorded_step() -> None:
    sleep = kinds.get("demo.sleep")
    run = asyncio.run(run_kind(sleep, {"steps": 4}, crash_after_effect=2))
    assert run.crashed_after == "step-1"
    assert run.stored == {"steps": 4, "replayed": 2}
    assert run.ran == ["step-0", "step-1", "step-2", "step-3"]


def test_demo_flaky_fails_its_first_attempts_then_succeeds() -> None:
    flaky = kinds.get("demo.flaky")
    with pytest.raises(errors.JobError, match="attempt 1"):
        asyncio.run(run_kind(flaky, {"fail_attempts": 1}))
    run = asyncio.run(run_kind(flaky, {"fail_attempts": 1}, attempt=2))
    assert run.stored == {"succeeded_on_attempt": 2}
    with pytest.raises(errors.PermanentError):
        asyncio.run(run_kind(flaky, {"permanent": True}))
