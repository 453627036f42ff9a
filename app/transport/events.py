"""EventBridge: the alerts put on an event bus (TASKLEASE_ALERT_EVENT_BUS), as Lambda
durable functions publish their status changes. Here because this package is the only one
that talks to AWS; the endpoint comes from botocore's own variables
(``AWS_ENDPOINT_URL_EVENTBRIDGE`` or ``AWS_ENDPOINT_URL``), so moto's server and LocalStack
need no code change."""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from typing import Any

import botocore.exceptions
from aiobotocore.session import get_session
from botocore.config import Config

from app import errors
from app.settings.config import Settings

SOURCE = "tasklease"
# PutEvents takes at most 10 entries a call.
MAX_ENTRIES = 10


@dataclass(frozen=True)
class Event:
    detail_type: str  # the alert's type, e.g. job.dead_lettered
    detail: dict[str, Any]
    resources: tuple[str, ...] = ()


class EventBus:
    """An open EventBridge client bound to one bus."""

    def __init__(self, settings: Settings) -> None:
        if not settings.alert_event_bus:
            raise errors.ConfigError("TASKLEASE_ALERT_EVENT_BUS must be set")
        self.bus = settings.alert_event_bus
        self.region = settings.region
        self.timeout = settings.alert_timeout_seconds
        self._stack = contextlib.AsyncExitStack()
        self._client: Any = None

    async def open(self) -> None:
        cfg = Config(
            retries={"mode": "standard", "max_attempts": 2},
            connect_timeout=self.timeout,
            read_timeout=self.timeout,
        )
        self._client = await self._stack.enter_async_context(
            get_session().create_client("events", region_name=self.region, config=cfg)
        )

    async def close(self) -> None:
        await self._stack.aclose()
        self._client = None

    async def put(self, events: Sequence[Event]) -> list[str | None]:
        """Put each event on the bus: per event, None when it was taken, else the error."""
        if self._client is None:
            raise errors.QueueError("the EventBridge client is not open")
        outcome: list[str | None] = []
        for start in range(0, len(events), MAX_ENTRIES):
            chunk = events[start : start + MAX_ENTRIES]
            entries = [
                {
                    "Source": SOURCE,
                    "DetailType": e.detail_type,
                    "Detail": json.dumps(e.detail, default=str),
                    "Resources": list(e.resources),
                    "EventBusName": self.bus,
                }
                for e in chunk
            ]
            try:
                resp = await self._client.put_events(Entries=entries)
            except (botocore.exceptions.BotoCoreError, botocore.exceptions.ClientError) as exc:
                outcome.extend([f"EventBridge: {exc}"] * len(chunk))
                continue
            for entry in resp.get("Entries", []):
                code = entry.get("ErrorCode")
                outcome.append(
                    None if not code else f"EventBridge: {code}: {entry.get('ErrorMessage', '')}"
                )
        return outcome


@contextlib.asynccontextmanager
async def connect(settings: Settings) -> AsyncIterator[EventBus | None]:
    """An open bus client for the block (None when no bus is configured)."""
    if not settings.alert_event_bus:
        yield None
        return
    bus = EventBus(settings)
    await bus.open()
    try:
        yield bus
    finally:
        await bus.close()
