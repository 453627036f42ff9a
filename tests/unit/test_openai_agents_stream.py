"""tasklease.openai_agents's token streaming through the in-memory runner: each model
response is streamed from the provider, its text to the job's stream as chunks under the
response's step key, and after a crash in the middle of an answer the stream continues
from the recorded chunks. The example agents (examples/openai_agent) against the fake
model server over HTTP."""

from __future__ import annotations

from typing import Any

import pytest
from agents import RunConfig

from examples import openai_agent
from examples.openai_agent import AgentDeps
from tasklease import JobContext, kind
from tasklease.fakemodel import RunningServer
from tasklease.openai_agents import durable_run
from tasklease.testing import EffectStore
from tests.unit.test_openai_agents import ANSWERS, STEPS, deps_for
from tests.unit.test_pydantic_ai import requests_of, server
from tests.unit.test_pydantic_ai_stream import nothing_streamed, run_with, streamed

pytestmark = pytest.mark.unit
__all__ = ["server"]  # the fixture, used by name

FINAL = "oai:model:4"  # the one response with text (the others hand off or call tools)


def response_texts(effects: dict[str, Any]) -> dict[str, str]:
    """Each recorded model response's text (its messages' output_text), those with text."""
    texts = {
        key: "".join(
            part["text"]
            for item in value["response"]["output"]
            if item["type"] == "message"
            for part in item["content"]
            if part["type"] == "output_text"
        )
        for key, value in effects.items()
        if ":model:" in key
    }
    return {key: text for key, text in texts.items() if text}


@kind("test.oai.stream", timeout_seconds=60)
async def quiet(ctx: JobContext[AgentDeps], q: openai_agent.Question) -> str:
    """The example agents with their tokens not streamed."""
    config = RunConfig(model=ctx.deps.model, tracing_disabled=True)
    result = await durable_run(
        ctx, openai_agent.triage, q.question, context=ctx.deps, run_config=config,
        stream_tokens=False,
    )  # fmt: skip
    return str(result.final_output)


async def run(server: RunningServer, agent: Any, store: EffectStore, **options: Any) -> Any:
    return await run_with(deps_for(server), agent, store, **options)


@pytest.mark.asyncio
async def test_each_model_response_s_text_is_streamed_under_its_step_key_as_it_comes(
    server: RunningServer,
) -> None:
    store = EffectStore()
    done = await run(server, openai_agent.research, store)
    assert done.ran == STEPS  # the steps as without streaming
    texts = response_texts(done.effects)
    assert list(texts) == [FINAL]  # a handoff's or a tool call's arguments are not text
    assert streamed(store) == texts
    assert texts[FINAL] == done.result.answer
    assert len(store.chunks[FINAL]) > 10  # word by word, as the server sent it
    sent = requests_of(server)["requests"]
    assert [r["answer"] for r in sent] == ANSWERS and all(r["stream"] for r in sent)
    # Usage as before, from the response.completed event: the SDK sends no
    # stream_options to a server not OpenAI's, so the integration asks for the usage.
    assert sorted(store.usage) == [k for k in STEPS if ":model:" in k]
    assert all(
        (u.input_tokens or 0) > 0 and (u.output_tokens or 0) > 0 for u in store.usage.values()
    )


@pytest.mark.asyncio
async def test_with_stream_tokens_false_nothing_is_streamed_and_responses_are_plain(
    server: RunningServer,
) -> None:
    store = EffectStore()
    nothing_streamed(server, await run(server, quiet, store), store, STEPS)


@pytest.mark.asyncio
async def test_a_crash_mid_answer_continues_the_stream_with_no_chunk_twice(
    server: RunningServer,
) -> None:
    calm = await run(server, openai_agent.research, EffectStore())
    before = requests_of(server)["count"]
    store = EffectStore()
    done = await run(server, openai_agent.research, store, crash_inside_stream=3)
    assert done.attempts == 2 and done.crashed_after == FINAL
    assert streamed(store) == response_texts(done.effects)
    # Attempt 1 wrote seq 0-2 and died; attempt 2 asked again and wrote from seq 3 on.
    assert store.chunk_writes == [(FINAL, seq) for seq in range(len(store.chunks[FINAL]))]
    # The response that died mid-answer was never recorded: it is the one asked again.
    sent = requests_of(server)["requests"][before:]
    assert [r["answer"] for r in sent] == [*ANSWERS, "text"]
    assert sent[-1]["digest"] == sent[-2]["digest"]
    assert done.result == calm.result
