"""ctx.progress and ctx.emit as a kind sees them: what they accept, what they refuse
(a PermanentError naming the problem), and what the in-memory runner keeps."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import pytest

from app import errors
from app.kinds.memory_store import EffectStore
from app.kinds.output import MAX_EMIT_BYTES
from app.kinds.testing import MemoryContext

pytestmark = pytest.mark.unit


def ctx() -> MemoryContext[None]:
    return MemoryContext(store=EffectStore(), job_id=uuid.uuid4(), kind="t", attempt=1, deps=None)


def test_progress_and_emit_are_kept_in_order() -> None:
    c = ctx()

    async def go() -> None:
        await c.progress(0.5, "half")
        await c.emit({"token": "a"})
        await c.progress(1)
        await c.emit("b")

    asyncio.run(go())
    assert [(e.type, e.data) for e in c.emitted] == [
        ("progress", {"fraction": 0.5, "note": "half"}),
        ("output", {"token": "a"}),
        ("progress", {"fraction": 1.0, "note": None}),
        ("output", "b"),
    ]


@pytest.mark.parametrize(
    ("call", "named"),
    [
        (lambda c: c.progress(1.5), "fraction"),
        (lambda c: c.progress(-0.1), "fraction"),
        (lambda c: c.progress("half"), "fraction"),
        (lambda c: c.progress(0.1, "x" * 501), "note"),
        (lambda c: c.emit({1, 2}), "JSON"),
        (lambda c: c.emit("x" * MAX_EMIT_BYTES), "bytes"),
        (lambda c: c.progress(True), "fraction"),
        (lambda c: c.emit({"x": float("nan")}), "JSON"),
        (lambda c: c.emit({"x": float("inf")}), "JSON"),
        (lambda c: c.emit("a\x00b"), "NUL"),
        (lambda c: c.emit({"k\x00": 1}), "NUL"),
        (lambda c: c.emit(["\ud800"]), "surrogate"),
        (lambda c: c.progress(0.5, "a\x00"), "note"),
    ],
)
def test_bad_output_is_a_permanent_error_naming_it(call: Any, named: str) -> None:
    c = ctx()
    with pytest.raises(errors.PermanentError, match=named):
        asyncio.run(call(c))
    assert c.emitted == []
