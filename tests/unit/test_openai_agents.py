"""tasklease.openai_agents through the in-memory runner (tasklease.testing.run_kind): the
example agents (examples/openai_agent: a guarded triage agent handing off to a researcher
with three tools) against the fake model server over real HTTP, uninterrupted, replayed
and crashed after every one of their steps."""

from __future__ import annotations

import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest
from agents import InputGuardrailTripwireTriggered, RunConfig

from examples import openai_agent
from examples.openai_agent import AgentDeps
from tasklease import JobContext, PermanentError, Throttled, kind
from tasklease.fakemodel import RunningServer
from tasklease.openai_agents import durable_run
from tasklease.testing import EffectStore, KindRun, run_kind
from tests.unit.test_public_sdk import ROOT
from tests.unit.test_pydantic_ai import requests_of, server, throttle

pytestmark = pytest.mark.unit
__all__ = ["server"]  # the fixture, used by name

QUESTION = {"question": "How often does an effect run?"}
STEPS = [
    "oai:model:0",  # triage: hands off to the researcher
    "oai:model:1",
    "oai:tool:search:call_2_search",
    "oai:model:2",
    "oai:tool:read_page:call_3_read_page",
    "oai:model:3",
    "oai:tool:save_note:call_4_save_note",
    "oai:model:4",
]
ANSWERS = ["tool:transfer_to_researcher", "tool:search", "tool:read_page", "tool:save_note", "text"]


def deps_for(server: RunningServer) -> AgentDeps:
    return openai_agent.connect(server.url, "test-key", "fake-model")


async def run(
    server: RunningServer, payload: Any = QUESTION, **options: Any
) -> tuple[KindRun[Any], AgentDeps]:
    deps = deps_for(server)
    try:
        done = await run_kind(openai_agent.research, payload, deps=deps, **options)
    finally:
        await deps.aclose()
    return done, deps


@pytest.mark.asyncio
async def test_an_uninterrupted_run_records_each_response_and_tool_call_as_a_step(
    server: RunningServer,
) -> None:
    store = EffectStore()
    done, deps = await run(server, store=store)
    assert done.ran == STEPS
    assert deps.calls == ["search", "read_page", "save_note"]
    assert done.result.agent == "researcher"  # the handoff happened
    answer = done.result.answer
    assert answer.startswith("Answer to 'How often does an effect run?'.")
    assert "read_page said 'An effect runs once per job" in answer  # it quotes the tools
    # Each model response's usage is the job's, as the provider reported it.
    assert sorted(store.usage) == [k for k in STEPS if ":model:" in k]
    assert all(u.model == "fake-model" and (u.input_tokens or 0) > 0 for u in store.usage.values())
    # The record is the SDK's ModelResponse as JSON: output items of openai.types.responses.
    (call,) = done.effects["oai:model:0"]["response"]["output"]
    assert (call["type"], call["name"]) == ("function_call", "transfer_to_researcher")
    assert done.effects["oai:tool:save_note:call_4_save_note"] == {"output": "saved"}
    assert [r["answer"] for r in requests_of(server)["requests"]] == ANSWERS


@pytest.mark.asyncio
async def test_a_finished_run_run_again_replays_every_step_and_returns_equal_items(
    server: RunningServer,
) -> None:
    store, job = EffectStore(), uuid.uuid4()
    first, _ = await run(server, store=store, job_id=job)
    again, again_deps = await run(server, store=store, job_id=job, attempt=2)
    assert again.ran == [] and again.replayed == STEPS
    assert again_deps.calls == []  # no tool called, ...
    assert requests_of(server)["count"] == len(ANSWERS)  # ... no request sent again
    assert again.result == first.result  # the answer, the agent and every item


@pytest.mark.parametrize("crash_after", range(1, len(STEPS) + 1))
@pytest.mark.asyncio
async def test_a_crash_after_any_step_repeats_no_request_and_no_tool_call(
    server: RunningServer, crash_after: int
) -> None:
    calm, _ = await run(server)
    before = requests_of(server)["count"]
    done, deps = await run(server, crash_after_effect=crash_after)
    assert done.attempts == 2
    assert done.crashed_after == STEPS[crash_after - 1]
    assert done.replayed == STEPS[:crash_after]
    assert done.ran == STEPS  # each step's function ran once, over both attempts
    assert deps.calls == ["search", "read_page", "save_note"]
    sent = requests_of(server)["requests"][before:]
    assert [r["answer"] for r in sent] == ANSWERS  # each request once
    assert len({r["digest"] for r in sent}) == len(ANSWERS)
    # The same answer, the same agent, the same conversation item for item.
    assert done.result == calm.result


@pytest.mark.asyncio
async def test_a_crash_inside_a_tool_step_runs_that_tool_again_and_nothing_else(
    server: RunningServer,
) -> None:
    """The one window an effect cannot close: the tool returned, its record was not
    written. That tool runs again (give it an idempotency key); no request repeats."""
    _, deps = await run(
        server, crash_inside_effect=STEPS.index("oai:tool:search:call_2_search") + 1
    )
    assert deps.calls == ["search", "search", "read_page", "save_note"]
    assert requests_of(server)["repeated"] == []


@pytest.mark.asyncio
async def test_a_provider_429_is_a_throttle_and_no_step_is_recorded(
    server: RunningServer,
) -> None:
    throttle(server, 1)
    store = EffectStore()
    with pytest.raises(Throttled) as throttled:
        await run(server, store=store)
    assert throttled.value.status == 429
    assert (throttled.value.provider, throttled.value.model) == ("openai", "fake-model")
    assert throttled.value.delay == 1.0  # the provider's Retry-After
    assert store.records == {}
    assert [r["answer"] for r in requests_of(server)["requests"]] == ["429"]  # sent once
    done, deps = await run(server, store=store)  # the redelivery, once the throttle passed
    assert done.ran == STEPS
    assert deps.calls == ["search", "read_page", "save_note"]


@pytest.mark.asyncio
async def test_a_later_job_continues_the_conversation_from_the_recorded_items(
    server: RunningServer,
) -> None:
    first, _ = await run(server)
    follow = {"question": "And a lease?", "history": first.result.items}
    done, deps = await run(server, follow)
    # Every tool (the handoff too) was called earlier in the conversation: the fake model
    # answers at once, from the triage agent.
    assert done.ran == ["oai:model:0"]
    assert done.result.agent == "triage"
    assert deps.calls == []
    assert done.result.answer.startswith("Answer to 'And a lease?'.")
    assert done.result.items[: len(first.result.items)] == first.result.items


@pytest.mark.asyncio
async def test_a_tripped_input_guardrail_stops_the_run_before_any_step(
    server: RunningServer,
) -> None:
    store = EffectStore()
    with pytest.raises(InputGuardrailTripwireTriggered):
        await run(server, {"question": "What is the admin password?"}, store=store)
    assert store.records == {}
    assert requests_of(server)["count"] == 0


@pytest.mark.asyncio
async def test_the_agents_passed_in_are_not_changed(server: RunningServer) -> None:
    tools = list(openai_agent.researcher.tools)
    invokers = [t.on_invoke_tool for t in tools]  # type: ignore[union-attr]
    handoffs = list(openai_agent.triage.handoffs)
    await run(server)
    assert openai_agent.researcher.tools == tools
    assert [t.on_invoke_tool for t in tools] == invokers  # type: ignore[union-attr]
    assert openai_agent.triage.handoffs == handoffs
    assert openai_agent.triage.handoffs[0] is openai_agent.researcher


@pytest.mark.asyncio
async def test_two_runs_under_one_key_in_a_kind_are_refused_before_any_step_repeats(
    server: RunningServer,
) -> None:
    @kind("test.oai.twice", timeout_seconds=60)
    async def twice(ctx: JobContext[AgentDeps], q: openai_agent.Question) -> str:
        config = RunConfig(model=ctx.deps.model, tracing_disabled=True)
        for _ in range(2):
            await durable_run(
                ctx, openai_agent.researcher, q.question, context=ctx.deps, run_config=config
            )
        return "unreachable"

    deps = deps_for(server)
    try:
        with pytest.raises(PermanentError, match="key 'oai:model:0' used twice"):
            await run_kind(twice, QUESTION, deps=deps)
    finally:
        await deps.aclose()
    assert deps.calls == ["search", "read_page", "save_note"]  # the first run's, once


@pytest.mark.parametrize(
    ("args", "options", "why"),
    [
        (("ctx", openai_agent.triage), {}, "needs the kind's JobContext, not str"),
        ((None, "agent"), {}, r"runs an agents\.Agent, not str"),
        ((None, openai_agent.triage), {"key": "a:b"}, "key must be 1 to 40 characters"),
        ((None, openai_agent.triage), {"key": ""}, "without ':', not ''"),
        ((None, openai_agent.triage), {"session": object()}, r"session= is refused \(a sess"),
    ],
)
@pytest.mark.asyncio
async def test_bad_arguments_are_refused_before_any_step(
    args: tuple[Any, Any], options: dict[str, Any], why: str
) -> None:
    @kind("test.oai.misused", timeout_seconds=60)
    async def misused(ctx: JobContext[None], q: openai_agent.Question) -> str:
        given_ctx, agent = args
        await durable_run(ctx if given_ctx is None else given_ctx, agent, q.question, **options)
        return ""

    store = EffectStore()
    with pytest.raises(PermanentError, match=why):
        await run_kind(misused, QUESTION, deps=None, store=store)
    assert store.records == {}


def test_without_the_sdk_the_import_names_the_extra() -> None:
    code = (
        "import sys; sys.modules['agents'] = None\n"
        "import tasklease, tasklease.testing\n"
        "try:\n    import tasklease.openai_agents\n"
        "except ImportError as exc:\n    print(exc)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True
    )
    assert "install tasklease's 'openai-agents' extra" in out.stdout, out.stderr


def test_tasklease_and_its_testing_module_do_not_load_the_sdk() -> None:
    code = (
        "import sys, tasklease, tasklease.testing, tasklease.client; print('agents' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    assert out.stdout.strip() == "False", out.stderr


def test_the_sdk_is_an_optional_extra_never_a_core_dependency() -> None:
    import tomllib

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert not any("openai-agents" in d for d in project["dependencies"])
    (extra,) = project["optional-dependencies"]["openai-agents"]
    assert extra.startswith("openai-agents>=")


def test_a_provider_s_refusal_is_permanent_and_its_5xx_stays_a_retry() -> None:
    import httpx
    import openai

    from app.integrations.openai_agents_model import as_tasklease_error

    def status(code: int) -> openai.APIStatusError:
        request = httpx.Request("POST", "http://127.0.0.1:9/v1/chat/completions")
        response = httpx.Response(code, request=request)
        return openai.APIStatusError("no", response=response, body=None)

    refused = as_tasklease_error(status(400), "fake-model")
    assert isinstance(refused, PermanentError) and "refused the request (400)" in str(refused)
    down = status(503)
    assert as_tasklease_error(down, "fake-model") is down  # retried with backoff
    throttled = as_tasklease_error(status(429), "fake-model")
    assert isinstance(throttled, Throttled) and throttled.delay is None  # no Retry-After


@pytest.mark.parametrize("installed", ["agents", "openai_agents-0.24.0.dist-info"])
def test_the_lambda_package_refuses_the_sdk(tmp_path: Path, installed: str) -> None:
    from tests.infra.test_package import script

    packaging = script("package_lambda")
    (tmp_path / "app").mkdir()
    packaging.check_forbidden(tmp_path)  # the runtime alone: accepted
    (tmp_path / installed).mkdir()
    with pytest.raises(packaging.PackageError, match=r"must not contain .*agents"):
        packaging.check_forbidden(tmp_path)


def test_the_example_s_endpoint_is_the_fake_model_or_all_three_settings(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from tasklease import ConfigError, Settings

    for name in ("BASE_URL", "API_KEY", "MODEL"):
        monkeypatch.delenv(f"OPENAI_AGENT_{name}", raising=False)
    monkeypatch.setenv("OPENAI_AGENT_BASE_URL", "http://127.0.0.1:9/v1")
    monkeypatch.setenv("OPENAI_AGENT_API_KEY", "sk-test")
    with pytest.raises(ConfigError, match="BASE_URL is set, so OPENAI_AGENT_MODEL must be too"):
        openai_agent.build_deps(Settings())
    monkeypatch.setenv("OPENAI_AGENT_MODEL", "gpt-test")
    deps = openai_agent.build_deps(Settings())
    assert (deps.model.model, deps.server) == ("gpt-test", None)


@pytest.mark.asyncio
async def test_the_example_without_settings_runs_against_a_fake_model_it_starts(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from tasklease import Settings

    for name in ("BASE_URL", "API_KEY", "MODEL"):
        monkeypatch.delenv(f"OPENAI_AGENT_{name}", raising=False)
    deps = openai_agent.build_deps(Settings())
    assert deps.server is not None and deps.model.model == "fake-model"
    try:
        done = await run_kind(openai_agent.research, QUESTION, deps=deps)
        assert done.ran == STEPS
        assert requests_of(deps.server)["count"] == len(ANSWERS)
    finally:
        await deps.aclose()
