"""Kind versions in memory (tasklease.testing.run_kind): the version a job starts on,
a replay that diverges from its record stopped with a clear error, and ``ctx.patched``.
The same through the real worker: tests/integration/test_kind_versions.py."""

from __future__ import annotations

from typing import Any

import pytest

from app import errors
from app.kinds import JobContext, Registry, kind
from app.kinds.generate import Usage
from app.kinds.memory_store import EffectStore
from app.kinds.registry import version_order
from app.kinds.testing import KindSuspended, run_kind
from tests.versioned_kinds import (
    Order,
    order_model_charge,
    order_no_charge,
    order_patched,
    order_v1,
    pinned_v1,
    pinned_v2,
)

pytestmark = pytest.mark.unit


async def waiting_on_v1() -> KindSuspended:
    """A job started on version 1, waiting for its callback, then answered."""
    with pytest.raises(KindSuspended) as waits:
        await run_kind(order_v1, {})
    waits.value.store.answer("go", result=True)
    return waits.value


def test_a_version_is_a_short_name_or_an_int_and_anything_else_is_refused() -> None:
    assert (order_v1.version, order_model_charge.version) == ("1", "2")
    assert kind("shop.default")(order_v1.run).version == "1"
    assert kind("shop.dated", version="2026-06-01")(order_v1.run).version == "2026-06-01"
    for bad in ("", "two words", "x" * 33, -1, True, 1.5, "-1"):
        with pytest.raises(errors.ConfigError, match=r"kind 'shop.bad': version=.* must be"):
            kind("shop.bad", version=bad)  # type: ignore[arg-type]
    with pytest.raises(errors.ConfigError, match="on_version_change='sometimes' is not one of"):
        kind("shop.bad", on_version_change="sometimes")  # type: ignore[typeddict-item]


@pytest.mark.asyncio
async def test_a_job_records_the_version_it_started_on_and_a_resume_on_the_same_code_passes() -> (
    None
):
    waiting = await waiting_on_v1()
    assert waiting.store.version == "1"
    assert waiting.store.shapes == {"charge": "effect", "callback:go": "callback"}
    done = await waiting.resume(order_v1, {})
    assert (done.result, done.ran, waiting.store.version) == ("v1", ["ship"], "1")


@pytest.mark.asyncio
async def test_a_recorded_step_reached_as_another_shape_stops_the_job_before_it_runs() -> None:
    waiting = await waiting_on_v1()
    with pytest.raises(errors.ReplayDiverged) as diverged:
        await waiting.resume(order_model_charge, {})
    assert str(diverged.value) == (
        "replay diverged at step 'charge': recorded as effect by the job's version 1, "
        "reached as model_call by version 2; nothing of it ran again "
        "(docs/howto/kind-versions.md)"
    )
    assert waiting.store.usage == {}  # the model was never called


@pytest.mark.asyncio
async def test_code_that_returns_without_reaching_a_recorded_step_stops_the_job() -> None:
    waiting = await waiting_on_v1()
    with pytest.raises(errors.ReplayDiverged) as diverged:
        await waiting.resume(order_no_charge, {})
    assert str(diverged.value) == (
        "replay diverged: the code (version 2) returned without reaching recorded step "
        "'charge', recorded as effect by the job's version 1; the result was not stored "
        "(docs/howto/kind-versions.md)"
    )


@pytest.mark.asyncio
async def test_patched_is_false_for_a_job_past_the_patch_and_true_for_one_before_it() -> None:
    waiting = await waiting_on_v1()
    resumed = await waiting.resume(order_patched, {})
    # Started on version 1: it charged without a tax (patch "tax" is behind it), and
    # reaches the receipt's patch for the first time on version 2.
    assert resumed.ran == ["patch:receipt", "receipt", "ship"]
    assert "tax" not in resumed.effects and "patch:tax" not in resumed.effects

    with pytest.raises(KindSuspended) as new:
        await run_kind(order_patched, {})
    assert new.value.ran == ["patch:tax", "tax", "charge", "callback:go"]
    new.value.store.answer("go", result=True)
    again = await new.value.resume(order_patched, {})
    assert again.replayed == ["patch:tax", "tax", "charge", "callback:go"]
    assert again.result == "v2" and new.value.store.shapes["patch:tax"] == "patch"


@kind("shop.receives")
async def receives(ctx: JobContext[None], p: Order) -> Any:
    message = await ctx.receive("orders", timeout=60)
    return message.body


@pytest.mark.asyncio
async def test_a_step_recorded_inside_another_is_reached_with_it() -> None:
    store = EffectStore()
    with pytest.raises(KindSuspended) as waits:
        await run_kind(receives, {}, store=store)
    assert store.shapes == {"receive-until:orders:1": "receive within receive:orders:1"}
    store.send("orders", {"id": 7})
    assert (await waits.value.resume(receives, {})).result == {"id": 7}
    # Replayed whole: the receive's timeout, recorded inside it, is not a missed step.
    assert (await run_kind(receives, {}, store=store)).result == {"id": 7}


def test_versions_of_one_kind_are_served_side_by_side_only_when_each_is_pinned() -> None:
    registry = Registry()
    registry.load(())  # no TASKLEASE_KINDS: only what this test registers
    registry.register(pinned_v2)
    registry.register(pinned_v1)
    # New jobs start on the newest; each version is served for the jobs that started on it.
    assert registry["shop.pinned"] is pinned_v2
    assert registry.versions("shop.pinned") == ["1", "2"]
    assert registry.version_of("shop.pinned", "1") is pinned_v1
    assert registry.version_of("shop.pinned", "3") is None
    assert registry.every_version() == [pinned_v2, pinned_v1]
    with pytest.raises(errors.ConfigError, match=r"registered twice.*both version 1"):
        registry.register(pinned_v1, origin="again")
    registry.register(order_v1)
    with pytest.raises(errors.ConfigError, match=r"on_version_change='pin' \(version 2 is not\)"):
        registry.register(order_patched)
    assert sorted(version_order(v) for v in ("10", "2", "v10", "v2")) == [
        version_order(v) for v in ("2", "10", "v2", "v10")
    ]


@pytest.mark.asyncio
async def test_a_pinned_job_is_not_resumed_on_another_version_in_memory() -> None:
    with pytest.raises(KindSuspended) as waits:
        await run_kind(pinned_v1, {})
    with pytest.raises(ValueError, match="pinned: this job started on version 1, not 2"):
        await waits.value.resume(pinned_v2, {})
    waits.value.store.answer("go", result=True)
    assert (await waits.value.resume(pinned_v1, {})).result == "v1"


@kind("shop.order", version="2")
async def order_swallowing(ctx: JobContext[None], p: Order) -> str:
    """Version 2 catches every error of its model call, and would ship without it."""
    try:
        await ctx.model_call("charge", lambda: ("charged", Usage("m")))
    except Exception:
        ctx.log.warning("no charge")
    await ctx.effect("ship", lambda: "shipped")
    return "v2"


@pytest.mark.asyncio
async def test_a_divergence_the_code_catches_still_stops_the_job() -> None:
    waiting = await waiting_on_v1()
    with pytest.raises(errors.ReplayDiverged, match="replay diverged at step 'charge'"):
        await waiting.resume(order_swallowing, {})
    assert "ship" not in waiting.store.records  # its next step raised it again


@pytest.mark.asyncio
async def test_patched_is_false_for_a_job_whose_steps_were_recorded_before_shapes_were() -> None:
    # A job that charged and waited before migration 0029 (its steps have no shape), or
    # on a 0.1.0 worker during the roll: it passed the tax's point without the patch.
    waiting = await waiting_on_v1()
    waiting.store.shapes.clear()
    waiting.store.version = None
    resumed = await waiting.resume(order_patched, {})
    assert "tax" not in resumed.effects and "patch:tax" not in resumed.effects
    assert resumed.ran == ["patch:receipt", "receipt", "ship"]


def test_two_versions_that_compare_equal_are_refused() -> None:
    registry = Registry()
    registry.register(pinned_v1)

    @kind("shop.pinned", version="01", on_version_change="pin")
    async def pinned_01(ctx: JobContext[None], p: Order) -> str:
        return "01"

    with pytest.raises(errors.ConfigError, match="versions 1 and 01 compare equal"):
        registry.register(pinned_01)
