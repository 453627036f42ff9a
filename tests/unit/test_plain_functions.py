"""A plain (not ``async def``) function handed to the SDK runs once, in a worker thread
(issue 30, item 1: ``ctx.effect("write", lambda: write_file(msg))`` with a synchronous
function ran it, then failed with ``TypeError: object dict can't be used in 'await'
expression``, which was retried as transient: the side effect happened twice and the job
was dead-lettered). The same holds for ``model_call``, ``generate``'s ``produce`` and
``wait_for_callback``'s ``notify``; a misuse is refused before anything runs."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from pydantic import BaseModel

from tasklease import JobContext, PermanentError, Usage, kind
from tasklease.testing import EffectStore, KindSuspended, run_kind

pytestmark = pytest.mark.unit


class Note(BaseModel):
    text: str


class Side:
    """Side effects, and the thread each ran on."""

    def __init__(self) -> None:
        self.done: list[Any] = []
        self.threads: list[int] = []

    def write_file(self, msg: str) -> dict[str, Any]:
        self.done.append(msg)
        self.threads.append(threading.get_ident())
        return {"written": msg}


def test_a_plain_function_passed_to_effect_runs_once_off_the_loop() -> None:
    side = Side()

    @kind("test.plain.effect")
    async def write(ctx: JobContext[None], p: Note) -> dict[str, Any]:
        loop_thread = threading.get_ident()
        written: dict[str, Any] = await ctx.effect("write", lambda: side.write_file(p.text))
        assert side.threads[-1] != loop_thread  # in a worker thread: the loop is not blocked
        return written

    run = asyncio.run(run_kind(write, {"text": "hello"}))
    assert run.result == {"written": "hello"}
    assert side.done == ["hello"]  # once
    assert run.ran == ["write"] and run.attempts == 1
    # A crash after the record: the next attempt replays it, the function is not called.
    side.done.clear()
    crashed = asyncio.run(run_kind(write, {"text": "again"}, crash_after_effect=1))
    assert side.done == ["again"] and crashed.replayed == ["write"]


def test_a_plain_function_that_returns_an_awaitable_is_awaited() -> None:
    side = Side()

    async def extract(text: str) -> list[str]:
        side.done.append(text)
        return text.split()

    @kind("test.plain.lambda_of_async")
    async def split(ctx: JobContext[None], p: Note) -> list[str]:
        words: list[str] = await ctx.effect("extract", lambda: extract(p.text))
        return words

    run = asyncio.run(run_kind(split, {"text": "a b c"}))
    assert run.result == ["a", "b", "c"] and side.done == ["a b c"]


def test_a_function_s_call_instead_of_the_function_is_refused_before_anything_runs() -> None:
    side = Side()

    async def extract() -> str:
        side.done.append("ran")
        return "x"

    @kind("test.plain.not_callable")
    async def wrong(ctx: JobContext[None], p: Note) -> str:
        coro = extract()
        try:
            got: str = await ctx.effect("extract", coro)  # type: ignore[call-overload]
        finally:
            coro.close()
        return got

    with pytest.raises(PermanentError, match=r"effect 'extract': fn must be a function"):
        asyncio.run(run_kind(wrong, {"text": "x"}))
    assert side.done == []


def test_a_plain_function_that_needs_the_event_loop_is_a_permanent_error() -> None:
    """In a worker thread there is no event loop: ``lambda: loop.run_in_executor(...)``
    (or ``asyncio.gather``) cannot work there, and saying so beats retrying it until the
    attempts are used up."""
    side = Side()

    @kind("test.plain.needs_loop")
    async def offload(ctx: JobContext[None], p: Note) -> Any:
        return await ctx.effect(
            "write",
            lambda: asyncio.get_running_loop().run_in_executor(None, side.write_file, p.text),
        )

    with pytest.raises(PermanentError, match=r"effect 'write'.*event loop.*async def"):
        asyncio.run(run_kind(offload, {"text": "x"}))
    assert side.done == []


def test_a_plain_model_call_runs_once_and_records_its_usage() -> None:
    side = Side()

    def call_model() -> tuple[dict[str, Any], Usage]:
        side.write_file("model")
        return {"answer": 42}, Usage("plain-model", 3, 4)

    @kind("test.plain.model_call")
    async def ask(ctx: JobContext[None], p: Note) -> Any:
        return await ctx.model_call("ask", call_model)

    store = EffectStore()
    run = asyncio.run(run_kind(ask, {"text": "x"}, store=store))
    assert run.result == {"answer": 42} and side.done == ["model"]
    assert store.usage["ask"] == Usage("plain-model", 3, 4)


def test_a_model_call_that_does_not_return_answer_and_usage_is_not_retried() -> None:
    """The model was called: a malformed return is permanent, not a retry that calls it
    again."""
    side = Side()

    @kind("test.plain.model_call_shape")
    async def ask(ctx: JobContext[None], p: Note) -> Any:
        return await ctx.model_call("ask", lambda: side.write_file("model"))

    with pytest.raises(PermanentError, match=r"model_call 'ask'.*\(answer, Usage\)"):
        asyncio.run(run_kind(ask, {"text": "x"}))
    assert side.done == ["model"]


def test_generate_takes_a_plain_generator_and_reads_it_off_the_loop() -> None:
    side = Side()

    def produce(partial: str) -> Iterator[str | Usage]:
        side.threads.append(threading.get_ident())
        yield from ["one ", "two"]
        side.done.append("model")
        yield Usage("plain-writer", 1, 2)

    @kind("test.plain.generate")
    async def write(ctx: JobContext[None], p: Note) -> str:
        side.threads.append(threading.get_ident())
        return await ctx.generate("answer", produce)

    store = EffectStore()
    run = asyncio.run(run_kind(write, {"text": "x"}, store=store))
    assert run.result == "one two" and side.done == ["model"]
    assert store.chunks["answer"] == {0: "one ", 1: "two"}
    assert side.threads[1] != side.threads[0]


def test_generate_refuses_a_produce_that_returns_text_rather_than_pieces() -> None:
    @kind("test.plain.generate_text")
    async def write(ctx: JobContext[None], p: Note) -> str:
        return await ctx.generate("answer", lambda partial: "all at once")  # type: ignore[arg-type, return-value]

    with pytest.raises(PermanentError, match=r"generate 'answer': produce returned str"):
        asyncio.run(run_kind(write, {"text": "x"}))


def test_a_plain_notify_runs_once() -> None:
    side = Side()

    @kind("test.plain.notify")
    async def approve(ctx: JobContext[None], p: Note) -> Any:
        return await ctx.wait_for_callback(
            "ok", timeout=60, notify=lambda token: side.write_file(token)
        )

    store = EffectStore()
    with pytest.raises(KindSuspended) as waiting:
        asyncio.run(run_kind(approve, {"text": "x"}, store=store))
    assert len(side.done) == 1 and side.done[0].startswith("memory-token:")
    store.answer("ok", result={"approved": True})
    run = asyncio.run(waiting.value.resume(approve, {"text": "x"}))
    assert run.result == {"approved": True}
    assert len(side.done) == 1  # replayed, not called again


def test_a_cancel_while_the_thread_runs_leaves_no_coroutine_unawaited() -> None:
    """``lambda: extract(text)`` with ``extract`` an ``async def``: the lambda runs in a
    thread and returns a coroutine. A cancel that came while the thread ran (the job's
    cancel, its timeout, a worker stopping) dropped that coroutine, never awaited: Python
    warned, and the state-machine test, which takes such warnings as errors, failed. The
    coroutine is closed instead, and never runs."""
    import gc
    import time
    import warnings

    from app.kinds import threads

    started, returning, ran = threading.Event(), threading.Event(), []

    async def extract() -> str:
        ran.append("extract")
        return "x"

    def slow_lambda() -> Any:
        started.set()
        time.sleep(0.3)
        returning.set()
        return extract()

    async def main() -> None:
        task = asyncio.create_task(threads.call("effect 'extract'", slow_lambda))
        await asyncio.to_thread(started.wait, 5)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert await asyncio.to_thread(returning.wait, 30)  # the thread returns its coroutine
        for _ in range(3000):  # and the loop takes its result: the thread's task ends
            if len(asyncio.all_tasks()) == 1:
                break
            await asyncio.sleep(0.01)
        assert len(asyncio.all_tasks()) == 1

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        asyncio.run(main())
        gc.collect()
    assert ran == []
    unawaited = [w for w in caught if "never awaited" in str(w.message)]
    assert not unawaited, [str(w.message) for w in unawaited]
