"""tasklease.pydantic_ai's token streaming through the in-memory runner: each model
request's text goes to the job's stream as chunks under the request's step key, and
after a crash in the middle of an answer the stream continues from the recorded chunks.
The research agent (examples/research_agent) against the fake model server over HTTP."""

from __future__ import annotations

from typing import Any

import pytest

from examples import research_agent
from examples.research_agent import ResearchDeps
from tasklease import JobContext, kind
from tasklease.fakemodel import RunningServer
from tasklease.testing import EffectStore, run_kind
from tests.unit.test_pydantic_ai import QUESTION, STEPS, deps_for, requests_of, server

pytestmark = pytest.mark.unit
__all__ = ["server"]  # the fixture, used by name

FINAL = "pai:model:3"  # the one request answered with text (the others call tools)


def streamed(store: EffectStore) -> dict[str, str]:
    """Each model step's text as a reader of the job's stream reads it (its chunks in seq
    order), once checked that no chunk was emitted twice and the seqs have no gap."""
    assert len(set(store.chunk_writes)) == len(store.chunk_writes), store.chunk_writes
    texts = {}
    for key, by_seq in store.chunks.items():
        assert sorted(by_seq) == list(range(len(by_seq))), f"{key}: a gap"
        texts[key] = "".join(by_seq[seq] for seq in range(len(by_seq)))
    return texts


def response_texts(effects: dict[str, Any]) -> dict[str, str]:
    """Each recorded model response's text (its text parts), the responses with text."""
    texts = {
        key: "".join(p["content"] for p in value["response"]["parts"] if p["part_kind"] == "text")
        for key, value in effects.items()
        if ":model:" in key
    }
    return {key: text for key, text in texts.items() if text}


@kind("test.pai.stream", timeout_seconds=60)
async def quiet(ctx: JobContext[ResearchDeps], q: research_agent.Question) -> str:
    """The research agent with its tokens not streamed."""
    result = await research_agent.durable.run(
        ctx, q.question, deps=ctx.deps, model=ctx.deps.model, stream_tokens=False
    )
    return str(result.output)


async def handler(_: Any, events: Any) -> None:
    async for _event in events:
        pass


@kind("test.pai.stream_events", timeout_seconds=60)
async def with_events(ctx: JobContext[ResearchDeps], q: research_agent.Question) -> str:
    """The research agent run with an event stream handler (Agent.run streams then)."""
    result = await research_agent.durable.run(
        ctx, q.question, deps=ctx.deps, model=ctx.deps.model, event_stream_handler=handler
    )
    return str(result.output)


async def run_with(deps: Any, agent: Any, store: EffectStore, **options: Any) -> Any:
    """``agent`` (a kind) run on ``deps`` (closed after), recording into ``store``."""
    try:
        return await run_kind(agent, QUESTION, deps=deps, store=store, **options)
    finally:
        await deps.aclose()


async def run(server: RunningServer, agent: Any, store: EffectStore, **options: Any) -> Any:
    return await run_with(deps_for(server), agent, store, **options)


def nothing_streamed(
    server: RunningServer, done: Any, store: EffectStore, steps: list[str]
) -> None:
    """A run with stream_tokens=False: its steps, no chunk, plain requests, the usage."""
    assert done.ran == steps
    assert store.chunks == {} and store.chunk_writes == []
    assert not any(r["stream"] for r in requests_of(server)["requests"])
    assert sorted(store.usage) == [k for k in steps if ":model:" in k]


@pytest.mark.parametrize("agent", [research_agent.research, with_events])
@pytest.mark.asyncio
async def test_each_model_request_s_text_is_streamed_under_its_step_key_as_it_comes(
    server: RunningServer, agent: Any
) -> None:
    store = EffectStore()
    done = await run(server, agent, store)
    assert done.ran == STEPS  # the steps as without streaming
    texts = response_texts(done.effects)
    assert list(texts) == [FINAL]  # tool calls' arguments are not text: not streamed
    assert streamed(store) == texts
    answer = done.result if isinstance(done.result, str) else done.result.answer
    assert texts[FINAL] == answer
    assert len(store.chunks[FINAL]) > 10  # word by word, as the server sent it
    assert all(r["stream"] for r in requests_of(server)["requests"])
    # Usage as before: every request's, from the final response.
    assert sorted(store.usage) == [k for k in STEPS if ":model:" in k]
    assert all((u.output_tokens or 0) > 0 for u in store.usage.values())


@pytest.mark.asyncio
async def test_with_stream_tokens_false_nothing_is_streamed_and_requests_are_plain(
    server: RunningServer,
) -> None:
    store = EffectStore()
    nothing_streamed(server, await run(server, quiet, store), store, STEPS)


@pytest.mark.parametrize("agent", [research_agent.research, with_events])
@pytest.mark.asyncio
async def test_a_crash_mid_answer_continues_the_stream_with_no_chunk_twice(
    server: RunningServer, agent: Any
) -> None:
    store = EffectStore()
    done = await run(server, agent, store, crash_inside_stream=3)
    assert done.attempts == 2 and done.crashed_after == FINAL
    texts = response_texts(done.effects)
    assert streamed(store) == texts
    # Attempt 1 wrote seq 0-2 and died; attempt 2 asked again and wrote from seq 3 on.
    assert store.chunk_writes == [(FINAL, seq) for seq in range(len(store.chunks[FINAL]))]
    # The request that died mid-answer was never recorded: it is the one sent again.
    sent = requests_of(server)
    answers = ["tool:search", "tool:read_page", "tool:save_note", "text", "text"]
    assert [r["answer"] for r in sent["requests"]] == answers
    assert sent["repeated"] == [sent["requests"][-1]["digest"]]
