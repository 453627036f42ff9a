"""The OpenAI-compatible provider against a real local HTTP server that throttles: a 429,
or a 503 with Retry-After, is ``Throttled`` with the provider's delay (seconds, an
HTTP-date, or OpenAI's retry-after-ms), in the plain call and in the streamed one; a 503
without Retry-After stays an ordinary transient failure."""

from __future__ import annotations

import asyncio
import datetime as dt
import email.utils
from collections.abc import Iterator
from typing import Any

import pytest

from app import errors
from app.demos.triage import providers
from app.demos.triage import settings as triage_settings
from tests.helpers import serving
from tests.integration.test_openai_stream import FakeOpenAI

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("clean_env")]


@pytest.fixture
def server() -> Iterator[FakeOpenAI]:
    srv = FakeOpenAI()
    with serving(srv):
        yield srv


def provider(server: FakeOpenAI) -> providers.OpenAICompatibleProvider:
    settings = triage_settings.load(
        model_provider="openai", openai_base_url=server.url, openai_model="asked-1"
    )
    return providers.OpenAICompatibleProvider(settings)


async def triage(model: providers.OpenAICompatibleProvider) -> Any:
    return await model.triage(subject="Refund", body="Charged twice", idempotency_key="j:t")


async def stream(model: providers.OpenAICompatibleProvider) -> list[Any]:
    return [p async for p in model.generate("Explain leases", partial="", idempotency_key="j:a")]


CALLS = {"triage": triage, "stream": stream}
IN_A_MINUTE = "(an HTTP-date a minute from now)"


def in_a_minute() -> str:
    return email.utils.format_datetime(dt.datetime.now(dt.UTC) + dt.timedelta(seconds=60), True)


@pytest.mark.parametrize("call", CALLS)
@pytest.mark.parametrize(
    ("status", "headers", "delay"),
    [
        (429, {"Retry-After": "7"}, 7.0),
        (429, {}, None),
        (429, {"retry-after-ms": "1500", "Retry-After": "2"}, 1.5),
        (503, {"Retry-After": "3"}, 3.0),
        (503, {"Retry-After": IN_A_MINUTE}, 60.0),
    ],
    ids=["429-seconds", "429-no-header", "429-ms", "503-seconds", "503-http-date"],
)
def test_a_throttle_is_raised_with_the_providers_delay(
    server: FakeOpenAI, call: str, status: int, headers: dict[str, str], delay: float | None
) -> None:
    server.status = status
    server.reply_headers = {k: in_a_minute() if v == IN_A_MINUTE else v for k, v in headers.items()}
    with pytest.raises(errors.Throttled) as raised:
        asyncio.run(CALLS[call](provider(server)))
    exc = raised.value
    assert (exc.provider, exc.model, exc.status) == ("openai", "asked-1", status)
    assert exc.by() == f"openai (asked-1): {status}"
    if delay is None:
        assert exc.delay is None
    else:
        assert exc.delay == pytest.approx(delay, abs=3)


@pytest.mark.parametrize("call", CALLS)
def test_a_503_without_retry_after_is_an_ordinary_transient_failure(
    server: FakeOpenAI, call: str
) -> None:
    server.status = 503
    with pytest.raises(providers.TransientModelError, match="503"):
        asyncio.run(CALLS[call](provider(server)))
