"""ctx.set_state in the in-memory runner (tasklease.testing.run_kind): what a kind
publishes is readable after the run, the bounds refuse a bad key or value (writing
nothing), and a replay after a crash publishing the same values changes nothing."""

from __future__ import annotations

from typing import Any

import pytest

from app import errors
from app.demos.basic import NoopPayload, publish
from app.kinds import JobContext, kind
from app.kinds.memory_store import EffectStore
from app.kinds.testing import run_kind
from app.settings import bounds

pytestmark = pytest.mark.unit


@pytest.mark.asyncio
async def test_a_run_records_what_the_kind_published() -> None:
    run = await run_kind(publish, {"steps": 3}, deps=None)
    assert run.state == {"phase": "finished", "done": 3}


@pytest.mark.asyncio
async def test_versions_count_changes_and_each_change_is_a_stream_item() -> None:
    store = EffectStore()
    await run_kind(publish, {"steps": 3}, deps=None, store=store)
    assert {k: (v.value, v.version, v.attempt) for k, v in store.state.items()} == {
        "phase": ("finished", 2, 1),
        "done": (3, 3, 1),
    }


@pytest.mark.asyncio
async def test_a_replay_after_a_crash_publishing_the_same_values_changes_nothing() -> None:
    # The first attempt dies once step-1 is recorded: it published phase and done=1.
    store = EffectStore()
    run = await run_kind(publish, {"steps": 3}, deps=None, store=store, crash_after_effect=2)
    assert run.crashed_after == "step-1" and run.attempts == 2
    # The re-run published phase=working and done=1 again: no new version for either.
    assert {k: (v.value, v.version, v.attempt) for k, v in store.state.items()} == {
        "phase": ("finished", 2, 2),
        "done": (3, 3, 2),
    }


def publisher(key: Any, value: Any) -> Any:
    @kind("test.publish_one")
    async def one(ctx: JobContext[None], p: NoopPayload) -> None:
        await ctx.set_state(key, value)

    return one


@pytest.mark.parametrize(
    ("key", "value", "names"),
    [
        ("", 1, "MAX_STATE_KEY_CHARS"),
        ("k" * (bounds.MAX_STATE_KEY_CHARS + 1), 1, "MAX_STATE_KEY_CHARS"),
        (7, 1, "MAX_STATE_KEY_CHARS"),
        ("big", "x" * bounds.MAX_STATE_VALUE_BYTES, "MAX_STATE_VALUE_BYTES"),
        ("nan", float("nan"), "JSON value"),
        ("obj", object(), "JSON value"),
        ("nul", "a\x00b", "NUL"),
    ],
)
@pytest.mark.asyncio
async def test_a_bad_key_or_value_is_a_permanent_error_and_writes_nothing(
    key: Any, value: Any, names: str
) -> None:
    store = EffectStore()
    with pytest.raises(errors.PermanentError, match=names):
        await run_kind(publisher(key, value), {}, deps=None, store=store)
    assert store.state == {}


@pytest.mark.asyncio
async def test_a_new_key_past_the_job_s_keys_is_refused_and_a_known_one_is_not() -> None:
    @kind("test.publish_many")
    async def many(ctx: JobContext[None], p: NoopPayload) -> None:
        for i in range(bounds.MAX_STATE_KEYS):
            await ctx.set_state(f"k{i}", i)
        await ctx.set_state("k0", "again")  # a key it has: fine
        await ctx.set_state("one-too-many", 1)

    store = EffectStore()
    with pytest.raises(errors.PermanentError, match="MAX_STATE_KEYS"):
        await run_kind(many, {}, deps=None, store=store)
    assert len(store.state) == bounds.MAX_STATE_KEYS
    assert store.state["k0"].value == "again" and "one-too-many" not in store.state
