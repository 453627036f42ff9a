"""The shared model budgets apply to agent runs' model requests (issue 31, Usage and
budgets): each model step of a Pydantic AI or Agents SDK run is a ``ctx.model_call``
with a budget ("provider/model", the model's own unless the run names one) and an
estimate of its input tokens, as a kind's own ``ctx.generate`` would pass. The budgets'
arithmetic (reserve, settle, wait) is tested on real PostgreSQL in
tests/integration/test_budget_reservations.py and test_provider_limits.py; here, what the
integrations hand it. Both frameworks talk HTTP to the fake model server."""

from __future__ import annotations

import itertools
from typing import Any

import pytest
from agents import RunConfig

from examples import openai_agent, research_agent
from tasklease import JobContext, PermanentError, kind
from tasklease.fakemodel import RunningServer
from tasklease.openai_agents import durable_run
from tasklease.testing import EffectStore, run_kind
from tests.unit.test_pydantic_ai import QUESTION, server

pytestmark = pytest.mark.unit

__all__ = ["server"]  # the fixture, imported


@pytest.fixture
def model_calls(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, Any, int]]:
    """Every ``ctx.model_call`` of the runs: (key, budget, tokens)."""
    seen: list[tuple[str, Any, int]] = []
    real = JobContext.model_call

    async def spy(
        self: JobContext[Any], key: str, fn: Any, *, budget: Any = None, tokens: int = 0
    ) -> Any:
        seen.append((key, budget, tokens))
        return await real(self, key, fn, budget=budget, tokens=tokens)

    monkeypatch.setattr(JobContext, "model_call", spy)
    return seen


def grows(calls: list[tuple[str, Any, int]]) -> bool:
    """Each request's estimate is more than the one before: the conversation grows."""
    tokens = [t for _, _, t in calls]
    return all(a < b for a, b in itertools.pairwise(tokens)) and tokens[0] > 0


@pytest.mark.asyncio
async def test_a_pydantic_ai_runs_requests_reserve_under_the_models_budget(
    server: RunningServer, model_calls: list[tuple[str, Any, int]]
) -> None:
    deps = research_agent.connect(server.url, "test-key", "fake-model")
    try:
        await run_kind(research_agent.research, QUESTION, deps=deps)
    finally:
        await deps.aclose()
    assert [k for k, _, _ in model_calls] == [f"pai:model:{n}" for n in range(4)]
    assert {b for _, b, _ in model_calls} == {"openai/fake-model"}
    assert grows(model_calls)


@pytest.mark.asyncio
async def test_an_agents_sdk_runs_responses_reserve_under_the_models_budget(
    server: RunningServer, model_calls: list[tuple[str, Any, int]]
) -> None:
    deps = openai_agent.connect(server.url, "test-key", "fake-model")
    try:
        await run_kind(openai_agent.research, QUESTION, deps=deps)
    finally:
        await deps.aclose()
    assert model_calls and all(k.startswith("oai:model:") for k, _, _ in model_calls)
    assert {b for _, b, _ in model_calls} == {"openai/fake-model"}
    assert grows(model_calls)


@pytest.mark.asyncio
async def test_a_run_may_name_the_budget_its_requests_share(
    server: RunningServer, model_calls: list[tuple[str, Any, int]]
) -> None:
    @kind("test.budget.named", timeout_seconds=60)
    async def named(ctx: JobContext[Any], q: research_agent.Question) -> str:
        pai = await research_agent.durable.run(
            ctx, q.question, deps=ctx.deps[0], model=ctx.deps[0].model, budget="shared/pool"
        )
        oai = await durable_run(
            ctx,
            openai_agent.triage,
            q.question,
            context=ctx.deps[1],
            run_config=RunConfig(model=ctx.deps[1].model, tracing_disabled=True),
            budget="shared/pool",
        )
        return f"{pai.output} {oai.final_output}"

    deps = (
        research_agent.connect(server.url, "test-key", "fake-model"),
        openai_agent.connect(server.url, "test-key", "fake-model"),
    )
    try:
        await run_kind(named, QUESTION, deps=deps)
    finally:
        for d in deps:
            await d.aclose()
    assert len(model_calls) >= 8
    assert {b for _, b, _ in model_calls} == {"shared/pool"}


@pytest.mark.parametrize("budget", ["gpt-4o", "", "/x", 7, "a/" + "b" * 250])
@pytest.mark.asyncio
async def test_a_budget_that_names_no_provider_and_model_is_refused_before_any_step(
    server: RunningServer, budget: Any
) -> None:
    @kind("test.budget.bad", timeout_seconds=60)
    async def bad(ctx: JobContext[Any], q: research_agent.Question) -> str:
        if ctx.deps is None:
            await durable_run(ctx, openai_agent.triage, q.question, budget=budget)
        await research_agent.durable.run(ctx, q.question, budget=budget)
        return ""

    for deps in (None, "pai"):
        store = EffectStore()
        with pytest.raises(PermanentError, match='budget must be "provider/model"'):
            await run_kind(bad, QUESTION, deps=deps, store=store)
        assert store.records == {}
