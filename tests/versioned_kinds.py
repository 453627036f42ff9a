"""One kind, "shop.order", in the versions a deployment may go through: the tests of
kind versions run jobs started on version 1 on each of them (in memory:
tests/unit/test_kind_versions_memory.py; through the worker: tests/integration/test_kind_versions.py).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from pydantic import BaseModel

from app.kinds import JobContext, Kind, kind
from app.kinds.generate import Usage


class Order(BaseModel):
    n: int = 0


async def charge(ctx: JobContext[None]) -> Any:
    return await ctx.effect("charge", lambda: "charged")


@kind("shop.order", version=1)
async def order_v1(ctx: JobContext[None], p: Order) -> str:
    await charge(ctx)
    await ctx.wait_for_callback("go", timeout=600)
    await ctx.effect("ship", lambda: "shipped")
    return "v1"


@kind("shop.order", version="2")
async def order_model_charge(ctx: JobContext[None], p: Order) -> str:
    """Version 2 asks a model under the key its version 1 charged under."""
    await ctx.model_call("charge", lambda: ("charged", Usage("m")))
    await ctx.wait_for_callback("go", timeout=600)
    return "v2"


@kind("shop.order", version="2")
async def order_no_charge(ctx: JobContext[None], p: Order) -> str:
    """Version 2 no longer charges."""
    await ctx.wait_for_callback("go", timeout=600)
    await ctx.effect("ship", lambda: "shipped")
    return "v2"


@kind("shop.order", version="2")
async def order_patched(ctx: JobContext[None], p: Order) -> str:
    """Version 2 adds a tax step before the charge and a receipt after the wait."""
    if await ctx.patched("tax"):
        await ctx.effect("tax", lambda: "taxed")
    await charge(ctx)
    await ctx.wait_for_callback("go", timeout=600)
    if await ctx.patched("receipt"):
        await ctx.effect("receipt", lambda: "sent")
    await ctx.effect("ship", lambda: "shipped")
    return "v2"


@kind("shop.pinned", version=1, on_version_change="pin")
async def pinned_v1(ctx: JobContext[None], p: Order) -> str:
    await charge(ctx)
    await ctx.wait_for_callback("go", timeout=600)
    return "v1"


@kind("shop.pinned", version=2, on_version_change="pin")
async def pinned_v2(ctx: JobContext[None], p: Order) -> str:
    """Version 2 asks a model where version 1 charged: a job of version 1 must not run it."""
    await ctx.model_call("charge", lambda: ("charged", Usage("m")))
    await ctx.wait_for_callback("go", timeout=600)
    return "v2"


@contextlib.contextmanager
def deployed(*versions: Kind[Any, Any, Any]) -> Iterator[None]:
    """This process's registry serves these kinds (one name: "shop.order"), as a worker
    redeployed with them would, until the block ends."""
    from app import kinds

    names = {k.name for k in versions}
    for name in names:
        kinds.REGISTRY.unregister(name)
    try:
        for k in versions:
            kinds.REGISTRY.register(k, origin="tests.versioned_kinds")
        yield
    finally:
        for name in names:
            kinds.REGISTRY.unregister(name)
