"""The lease spans' export at the claim (app/worker/traces.py ClaimExports): one flush at a
time, shared by the claims that come meanwhile, and never holding a claim up for long."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator

import pytest

from app import tracing
from app.worker import traces

pytestmark = pytest.mark.unit


class Provider:
    """Counts flushes; each blocks until ``release`` is set."""

    def __init__(self) -> None:
        self.flushes = 0
        self.release = threading.Event()

    def force_flush(self, timeout_millis: int = 0) -> bool:
        self.flushes += 1
        self.release.wait(5)
        return True


@pytest.fixture
def provider() -> Iterator[Provider]:
    p = Provider()
    tracing.use(p)
    try:
        yield p
    finally:
        p.release.set()
        tracing.use(None)


def test_claims_during_a_flush_share_the_next_one(provider: Provider) -> None:
    async def go() -> None:
        exports = traces.ClaimExports()
        first = asyncio.ensure_future(exports.export())
        await asyncio.sleep(0.05)  # the first flush is under way (blocked)
        others = [asyncio.ensure_future(exports.export()) for _ in range(5)]
        await asyncio.sleep(0.05)
        assert provider.flushes == 1  # the others wait for the next, not one each
        provider.release.set()
        await asyncio.gather(first, *others)
        await asyncio.sleep(0.1)
        assert provider.flushes == 2

    asyncio.run(go())


def test_a_collector_that_hangs_does_not_hold_the_claim(provider: Provider) -> None:
    async def go() -> None:
        exports = traces.ClaimExports()
        await exports.export()  # returns while the flush is still blocked
        assert provider.flushes == 1
        assert not provider.release.is_set()
        provider.release.set()

    asyncio.run(go())
