"""ctx.generate through the in-memory runner: replay, continuation from the recorded
chunks after a crash mid-stream, usage and cost; the fake's deterministic stream; and
ChunkStream.said, the agent integrations' streaming of an answer asked for again."""

from __future__ import annotations

import asyncio
import json
import uuid
from pathlib import Path
from typing import Any

import httpx
import pytest
from pydantic import BaseModel

from app import errors
from app.demos.triage import TriageDeps, providers
from app.demos.triage import settings as triage_settings
from app.demos.triage.writing import fake_text
from app.demos.writer import write
from app.kinds import JobContext, kind
from app.kinds.generate import ChunkStream, Usage
from app.kinds.memory_store import EffectStore
from app.kinds.testing import MemoryContext, run_kind
from app.services import costs
from app.settings import config

pytestmark = [pytest.mark.unit, pytest.mark.usefixtures("clean_env")]

PAYLOAD = {"prompt": "tell me about leases", "words": 12}


def deps(log: Path) -> TriageDeps:
    settings = triage_settings.load(fake_model_chunk_ms=0, fake_model_log=str(log))
    return TriageDeps(providers.FakeProvider(settings), httpx.AsyncClient(), None)


def calls(log: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in log.read_text().splitlines()]


def chunk_texts(store: EffectStore, key: str = "answer") -> list[str]:
    got = store.chunks[key]
    assert sorted(got) == list(range(len(got)))  # seqs 0..n-1, no gap
    return [got[i] for i in range(len(got))]


def test_a_streamed_answer_is_chunked_recorded_with_its_usage_and_replayed(tmp_path: Path) -> None:
    store, log = EffectStore(), tmp_path / "calls.jsonl"
    run = asyncio.run(run_kind(write, PAYLOAD, deps=deps(log), store=store))
    text = fake_text(PAYLOAD["prompt"], 12)
    assert run.result.text == text and "".join(chunk_texts(store)) == text
    assert len(store.chunks["answer"]) == 12  # a word a piece
    assert run.effects["answer"]["text"] == text
    assert store.usage["answer"] == Usage("fake-writer-1", 4, 12)
    # Run again on the same record: returned as recorded, the model not called again.
    again = asyncio.run(run_kind(write, PAYLOAD, deps=deps(log), store=store))
    assert again.result.text == text and again.replayed == ["answer"]
    assert len(calls(log)) == 1


def test_a_crash_mid_stream_continues_from_the_recorded_chunks(tmp_path: Path) -> None:
    store, log = EffectStore(), tmp_path / "calls.jsonl"
    run = asyncio.run(run_kind(write, PAYLOAD, deps=deps(log), store=store, crash_inside_stream=5))
    text = fake_text(PAYLOAD["prompt"], 12)
    assert run.attempts == 2 and run.crashed_after == "answer"
    pieces = chunk_texts(store)
    assert "".join(pieces) == text == run.result.text == run.effects["answer"]["text"]
    assert len(pieces) == 12  # no chunk twice
    first, second = calls(log)
    assert first["partial"] == 0 and second["partial"] == len("".join(pieces[:5]))
    assert run.effects["answer"]["continued_from"] == second["partial"]
    # The continuation pays for the partial as input and only the rest as output.
    assert store.usage["answer"].output_tokens == 7


def test_the_fake_refuses_a_partial_that_is_not_a_prefix_of_its_text(tmp_path: Path) -> None:
    store = EffectStore(chunks={"answer": {0: "not the fake's words"}})
    with pytest.raises(errors.PermanentError, match="not a prefix"):
        asyncio.run(run_kind(write, PAYLOAD, deps=deps(tmp_path / "l"), store=store))


def test_a_gap_in_the_recorded_chunks_continues_from_the_prefix_before_it(tmp_path: Path) -> None:
    text = fake_text(PAYLOAD["prompt"], 12)
    words = text.split(" ")
    # seq 2 missing: seq 3 is ignored, the continuation starts after seq 1.
    store = EffectStore(chunks={"answer": {0: words[0], 1: " " + words[1], 3: "x"}})
    log = tmp_path / "calls.jsonl"
    run = asyncio.run(run_kind(write, PAYLOAD, deps=deps(log), store=store))
    assert run.result.text == text
    assert calls(log)[0]["partial"] == len(words[0]) + 1 + len(words[1])


class Nothing(BaseModel):
    pass


def test_a_produce_that_reports_no_usage_is_a_bug() -> None:
    async def pieces(partial: str) -> Any:
        yield "a"

    @kind("test.no_usage")
    async def no_usage(ctx: JobContext[None], p: Nothing) -> str:
        return await ctx.generate("g", pieces)

    with pytest.raises(errors.PermanentError, match="no usage"):
        asyncio.run(run_kind(no_usage, {}, deps=None))


def test_triage_records_its_usage(tmp_path: Path) -> None:
    from app.demos.triage import triage

    store = EffectStore()
    ticket = {"ticket_id": "T-1", "subject": "Refund please", "body": "I was charged twice."}
    settings = triage_settings.load(fake_model_latency_ms=0)
    d = TriageDeps(providers.FakeProvider(settings), httpx.AsyncClient(), None)
    asyncio.run(run_kind(triage, ticket, deps=d, store=store))
    usage = store.usage["triage"]
    assert usage.model == "fake-triage-1" and usage.input_tokens == 6
    assert usage.output_tokens and usage.output_tokens > 0


def test_prices_come_from_settings_over_the_defaults_and_bad_ones_name_the_variable(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("TASKLEASE_MODEL_PRICES", '{"mine": {"input": 1, "output": 2}}')
    settings = config.load()
    assert costs.cost_usd(settings, "mine", 1_000_000, 500_000) == 2.0
    assert costs.cost_usd(settings, "fake-writer-1", 1_000_000, 0) == 0.1
    assert costs.cost_usd(settings, "unknown", 10, 10) is None
    for bad in ('{"mine": {"input": -1, "output": 2}}', '{"mine": {"input": 1}}', "[1"):
        monkeypatch.setenv("TASKLEASE_MODEL_PRICES", bad)
        with pytest.raises(errors.ConfigError, match="TASKLEASE_MODEL_PRICES"):
            config.load()


def test_a_recorded_model_call_counts_its_tokens_and_cost_in_the_metrics() -> None:
    from prometheus_client import REGISTRY

    def sample(name: str, **labels: str) -> float:
        return REGISTRY.get_sample_value(name, labels) or 0.0

    tokens = {"kind": "test.k", "model": "fake-writer-1"}
    before_in = sample("tasklease_model_tokens_total", **tokens, direction="input")
    before_out = sample("tasklease_model_tokens_total", **tokens, direction="output")
    before_cost = sample("tasklease_model_cost_dollars_total", **tokens)
    costs.count(config.load(), "test.k", Usage("fake-writer-1", 1_000_000, 2_000_000))
    assert sample("tasklease_model_tokens_total", **tokens, direction="input") - before_in == 1e6
    assert sample("tasklease_model_tokens_total", **tokens, direction="output") - before_out == 2e6
    assert sample("tasklease_model_cost_dollars_total", **tokens) - before_cost == pytest.approx(
        0.9
    )


def test_a_model_call_is_a_chat_span_with_the_genai_attributes(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from app.demos.triage import writing

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    monkeypatch.setattr(writing, "tracer", provider.get_tracer("test"))
    asyncio.run(run_kind(write, PAYLOAD, deps=deps(tmp_path / "l")))
    (span,) = exporter.get_finished_spans()
    assert span.name == "chat fake-writer-1"
    assert dict(span.attributes or {}) == {
        "gen_ai.operation.name": "chat",
        "gen_ai.system": "fake",
        "gen_ai.provider.name": "fake",
        "gen_ai.request.model": "fake-writer-1",
        "gen_ai.response.model": "fake-writer-1",
        "gen_ai.usage.input_tokens": 4,
        "gen_ai.usage.output_tokens": 12,
    }


def test_pieces_postgresql_cannot_store_are_recorded_as_replacement_characters() -> None:
    """A server may send \\u0000 or a lone surrogate; jsonb refuses both, which would fail
    every write of the attempt: the chunk and the recorded text carry U+FFFD instead, and
    a piece too long for one chunk is cut."""

    async def pieces(partial: str) -> Any:
        yield "a\x00b"
        yield "c\ud800d"
        yield "e" * 20_000
        yield Usage(model="m", input_tokens=1, output_tokens=3)

    @kind("test.unstorable")
    async def unstorable(ctx: JobContext[None], p: Nothing) -> str:
        return await ctx.generate("g", pieces)

    store = EffectStore()
    run = asyncio.run(run_kind(unstorable, {}, deps=None, store=store))
    assert run.result.startswith("a\ufffdbc") and "\x00" not in run.result
    run.result.encode("utf-8")  # no lone surrogate left
    assert len(run.result) == 3 + 1 + 3 + 1 + 20_000
    texts = [text for _seq, text in sorted(store.chunks["g"].items())]
    assert "".join(texts) == run.result and max(len(t) for t in texts) <= 8_000


@pytest.mark.parametrize("count", [-1, 2**31, 1.5, True, "7"])
def test_a_token_count_a_provider_got_wrong_is_not_known(count: Any) -> None:
    usage = Usage(model="m", input_tokens=count, output_tokens=4)
    assert (usage.input_tokens, usage.output_tokens) == (None, 4)


def test_a_dated_model_version_takes_its_models_price() -> None:
    settings = config.Settings(
        model_prices='{"gpt-4o-mini": {"input": 1, "output": 2}, "gpt-4o": {"input": 5, "output": 5}}'
    )
    assert costs.cost_usd(settings, "gpt-4o-mini-2024-07-18", 1_000_000, 0) == 1.0
    assert costs.cost_usd(settings, "gpt-4o-2024-08-06", 0, 1_000_000) == 5.0
    assert costs.cost_usd(settings, "o3-2025-04-16", 1, 1) is None


async def said(store: EffectStore, pieces: list[str]) -> ChunkStream:
    ctx: MemoryContext[None] = MemoryContext(
        store=store, job_id=uuid.uuid4(), kind="test", attempt=2, deps=None
    )
    stream = await ChunkStream.open(ctx, "k")
    for piece in pieces:
        await stream.said(piece)
    return stream


@pytest.mark.asyncio
async def test_an_answer_said_again_is_streamed_only_past_the_recorded_chunks() -> None:
    store = EffectStore(chunks={"k": {0: "The cat ", 1: "sa"}})
    stream = await said(store, ["The ", "cat sat", " on the mat."])
    assert not stream.diverged
    assert store.chunks["k"] == {0: "The cat ", 1: "sa", 2: "t", 3: " on the mat."}
    assert stream.text == "The cat sat on the mat."


@pytest.mark.asyncio
async def test_an_answer_that_differs_from_the_recorded_prefix_continues_past_its_length(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A model that says something else on the attempt after the crash: the reader has
    the recorded prefix, then the new answer past that length (the record holds the new
    answer whole); the divergence is logged."""
    store = EffectStore(chunks={"k": {0: "The cat ", 1: "sat"}})
    stream = await said(store, ["A dog ", "ran off."])
    assert stream.diverged
    assert "".join(store.chunks["k"].values()) == "The cat sat" + "A dog ran off."[11:]
    assert "differs from the text streamed before the crash" in caplog.text
