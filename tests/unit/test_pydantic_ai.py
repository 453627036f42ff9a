"""tasklease.pydantic_ai through the in-memory runner (tasklease.testing.run_kind): the
example research agent (examples/research_agent) against the fake model server over real
HTTP, uninterrupted, replayed and crashed after every one of its steps."""

from __future__ import annotations

import subprocess
import sys
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from pydantic_ai.messages import PartStartEvent

from examples import research_agent
from examples.research_agent import ResearchDeps
from tasklease import JobContext, PermanentError, Throttled, kind
from tasklease.fakemodel import RunningServer, serve_in_thread
from tasklease.pydantic_ai import TaskleaseAgent
from tasklease.testing import EffectStore, KindRun, run_kind
from tests.unit.test_public_sdk import ROOT

pytestmark = pytest.mark.unit

QUESTION = {"question": "How often does an effect run?"}
STEPS = [
    "pai:start",
    "pai:model:0",
    "pai:tool:search:call_1_search",
    "pai:model:1",
    "pai:tool:read_page:call_2_read_page",
    "pai:model:2",
    "pai:tool:save_note:call_3_save_note",
    "pai:model:3",
]


@pytest.fixture
def server() -> Iterator[RunningServer]:
    running = serve_in_thread()
    yield running
    running.stop()


def deps_for(server: RunningServer) -> ResearchDeps:
    return deps_for_url(server.url)


def deps_for_url(url: str) -> ResearchDeps:
    return research_agent.connect(url, "test-key", "fake-model")


def requests_of(server: RunningServer) -> dict[str, Any]:
    answer: dict[str, Any] = httpx.get(f"{server.url}/requests", timeout=10).json()
    return answer


def throttle(server: RunningServer, n: int) -> None:
    """The fake model answers the next ``n`` requests with a 429 (Retry-After: 1)."""
    httpx.post(f"{server.url}/throttle", json={"next": n}, timeout=10).raise_for_status()


def conversation(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The messages without what differs between two jobs (ids, times, durations): who
    said what, which tool was called with what and what it returned."""
    drop = {"timestamp", "run_id", "conversation_id", "duration", "request_timestamp"}

    def clean(value: Any) -> Any:
        if isinstance(value, dict):
            return {k: clean(v) for k, v in value.items() if k not in drop}
        if isinstance(value, list):
            return [clean(v) for v in value]
        return value

    return [clean({"kind": m["kind"], "parts": m["parts"]}) for m in messages]


async def run(server: RunningServer, **options: Any) -> tuple[KindRun[Any], ResearchDeps]:
    deps = deps_for(server)
    try:
        done = await run_kind(research_agent.research, QUESTION, deps=deps, **options)
    finally:
        await deps.aclose()
    return done, deps


@pytest.mark.asyncio
async def test_an_uninterrupted_run_records_each_request_and_tool_call_as_a_step(
    server: RunningServer,
) -> None:
    store = EffectStore()
    done, deps = await run(server, store=store)
    assert done.ran == STEPS
    assert deps.calls == ["search", "read_page", "save_note"]
    answer = done.result.answer
    assert answer.startswith("Answer to 'How often does an effect run?'.")
    assert "read_page said 'An effect runs once per job" in answer  # it quotes the tools
    # Each model request's usage is the job's, as the provider reported it.
    assert sorted(store.usage) == [k for k in STEPS if ":model:" in k]
    assert all(u.model == "fake-model" and (u.input_tokens or 0) > 0 for u in store.usage.values())
    # The record is Pydantic AI's own JSON: a response, and a tool's return.
    response = done.effects["pai:model:0"]["response"]
    assert response["kind"] == "response"
    assert response["parts"][0]["tool_name"] == "search"
    assert done.effects["pai:tool:save_note:call_3_save_note"]["result"] == "saved"
    sent = requests_of(server)
    assert [r["answer"] for r in sent["requests"]] == [
        "tool:search",
        "tool:read_page",
        "tool:save_note",
        "text",
    ]


@pytest.mark.asyncio
async def test_a_finished_run_run_again_replays_every_step_and_returns_equal_messages(
    server: RunningServer,
) -> None:
    store, job = EffectStore(), uuid.uuid4()
    first, _ = await run(server, store=store, job_id=job)
    again, again_deps = await run(server, store=store, job_id=job, attempt=2)
    assert again.ran == [] and again.replayed == STEPS
    assert again_deps.calls == []  # no tool called, ...
    assert requests_of(server)["count"] == 4  # ... no request sent again
    # The same run id, clock and records: the messages equal, times and ids included.
    assert again.stored == first.stored


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
    assert sorted(deps.calls) == ["read_page", "save_note", "search"]
    digests = [r["digest"] for r in requests_of(server)["requests"][before:]]
    assert len(digests) == 4 and len(set(digests)) == 4  # none sent twice
    assert done.result.answer == calm.result.answer
    assert conversation(done.result.messages) == conversation(calm.result.messages)


@pytest.mark.asyncio
async def test_a_crash_inside_a_tool_step_runs_that_tool_again_and_nothing_else(
    server: RunningServer,
) -> None:
    """The one window an effect cannot close: the tool returned, its record was not
    written. That tool runs again (give it an idempotency key); no request repeats."""
    _, deps = await run(
        server, crash_inside_effect=STEPS.index("pai:tool:search:call_1_search") + 1
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
    assert throttled.value.provider == "openai"
    assert throttled.value.delay == 1.0  # the provider's Retry-After
    assert list(store.records) == ["pai:start"]
    assert [r["answer"] for r in requests_of(server)["requests"]] == ["429"]  # sent once
    done, deps = await run(server, store=store)  # the redelivery, once the throttle passed
    assert done.ran == STEPS[1:]
    assert deps.calls == ["search", "read_page", "save_note"]


@pytest.mark.asyncio
async def test_a_later_job_continues_the_conversation_from_the_recorded_messages(
    server: RunningServer,
) -> None:
    first, _ = await run(server)
    follow = {"question": "And a lease?", "history": first.result.messages}
    deps = deps_for(server)
    try:
        done = await run_kind(research_agent.research, follow, deps=deps)
    finally:
        await deps.aclose()
    # Every tool was called earlier in the conversation: the model answers at once.
    assert done.ran == ["pai:start", "pai:model:0"]
    assert deps.calls == []
    assert done.result.answer.startswith("Answer to 'And a lease?'.")
    assert done.result.messages[: len(first.result.messages)] == first.result.messages


@pytest.mark.asyncio
async def test_a_streamed_run_records_the_drained_response_and_replays_its_events(
    server: RunningServer,
) -> None:
    seen: list[str] = []

    async def handler(_: Any, events: Any) -> None:
        async for event in events:
            if isinstance(event, PartStartEvent):
                seen.append(event.part.part_kind)

    @kind("test.pai.streamed", timeout_seconds=60)
    async def streamed(ctx: JobContext[ResearchDeps], q: research_agent.Question) -> str:
        result = await research_agent.durable.run(
            ctx, q.question, deps=ctx.deps, model=ctx.deps.model, event_stream_handler=handler
        )
        return str(result.output)

    deps = deps_for(server)
    try:
        done = await run_kind(streamed, QUESTION, deps=deps, crash_after_effect=4)
    finally:
        await deps.aclose()
    assert done.ran == STEPS
    assert all(r["stream"] for r in requests_of(server)["requests"])
    assert requests_of(server)["repeated"] == []
    # Attempt 1 saw the first response's events (it died once the second was recorded);
    # attempt 2 saw every response's: the two recorded ones replayed from the record.
    assert seen == ["tool-call"] + ["tool-call"] * 3 + ["text"]


@pytest.mark.asyncio
async def test_two_runs_under_one_key_in_a_kind_are_refused_before_any_step_repeats(
    server: RunningServer,
) -> None:
    @kind("test.pai.twice", timeout_seconds=60)
    async def twice(ctx: JobContext[ResearchDeps], q: research_agent.Question) -> str:
        for _ in range(2):
            await research_agent.durable.run(ctx, q.question, deps=ctx.deps, model=ctx.deps.model)
        return "unreachable"

    deps = deps_for(server)
    try:
        with pytest.raises(PermanentError, match="key 'pai:start' used twice"):
            await run_kind(twice, QUESTION, deps=deps)
    finally:
        await deps.aclose()
    assert deps.calls == ["search", "read_page", "save_note"]  # the first run's, once


@pytest.mark.asyncio
async def test_bad_arguments_are_refused_naming_what_was_wrong() -> None:
    durable = research_agent.durable
    with pytest.raises(PermanentError, match="JobContext, not str"):
        await durable.run("ctx", "q")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"wraps a pydantic_ai\.Agent, not str"):
        TaskleaseAgent("agent")  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("options", "why"),
    [
        ({"key": "a:b"}, "key must be 1 to 40 characters without ':', not 'a:b'"),
        ({"key": ""}, "key must be 1 to 40 characters without ':', not ''"),
        ({"run_id": "mine"}, r"run_id= is TaskleaseAgent's own \(it makes replays equal\)"),
        ({"capabilities": []}, "capabilities= is TaskleaseAgent's own"),
        ({"deferred_tool_results": None}, "deferred_tool_results= is TaskleaseAgent's own"),
    ],
)
@pytest.mark.asyncio
async def test_bad_run_options_are_refused_before_any_step(
    options: dict[str, Any], why: str
) -> None:
    @kind("test.pai.options", timeout_seconds=60)
    async def misused(ctx: JobContext[None], q: research_agent.Question) -> str:
        await research_agent.durable.run(ctx, q.question, **options)
        return ""

    store = EffectStore()
    with pytest.raises(PermanentError, match=why):
        await run_kind(misused, QUESTION, deps=None, store=store)
    assert store.records == {}


def test_without_pydantic_ai_the_import_names_the_extra() -> None:
    code = (
        "import sys; sys.modules['pydantic_ai'] = None\n"
        "import tasklease, tasklease.testing\n"
        "try:\n    import tasklease.pydantic_ai\n"
        "except ImportError as exc:\n    print(exc)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True
    )
    assert "install tasklease's 'pydantic-ai' extra" in out.stdout, out.stderr


def test_tasklease_and_its_testing_module_do_not_load_pydantic_ai() -> None:
    code = "import sys, tasklease, tasklease.testing, tasklease.client; print('pydantic_ai' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    assert out.stdout.strip() == "False", out.stderr


def test_pydantic_ai_is_an_optional_extra_never_a_core_dependency() -> None:
    import tomllib

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert not any("pydantic-ai" in d for d in project["dependencies"])
    (extra,) = project["optional-dependencies"]["pydantic-ai"]
    assert extra.startswith("pydantic-ai-slim[openai]>=")


def test_a_provider_s_refusal_is_permanent_and_its_5xx_stays_a_retry() -> None:
    from pydantic_ai.exceptions import ModelHTTPError
    from pydantic_ai.models.openai import OpenAIChatModel
    from pydantic_ai.providers.openai import OpenAIProvider

    from app.integrations.pydantic_ai_model import as_tasklease_error

    provider = OpenAIProvider(base_url="http://127.0.0.1:9/v1", api_key="k")
    model = OpenAIChatModel("fake-model", provider=provider)
    refused = as_tasklease_error(ModelHTTPError(400, "fake-model", "bad"), model)
    assert isinstance(refused, PermanentError) and "refused the request (400)" in str(refused)
    down = ModelHTTPError(503, "fake-model", "down")
    assert as_tasklease_error(down, model) is down  # retried with backoff, an attempt used


def test_a_step_key_past_the_table_s_limit_keeps_its_head_and_a_digest() -> None:
    from app.integrations.pydantic_ai import step_key
    from app.settings.bounds import MAX_EFFECT_KEY_CHARS

    long_a = step_key("pai", "tool", "t" * 300, "call_1")
    long_b = step_key("pai", "tool", "t" * 300, "call_2")
    assert len(long_a) == MAX_EFFECT_KEY_CHARS and long_a.startswith("pai:tool:ttt")
    assert long_a != long_b
    assert step_key("pai", "model", "0") == "pai:model:0"
