"""The one sync entry point for Lambda: an event loop per process, kept across invocations.

Lambda calls handlers synchronously; the engine is async. Each process keeps one
loop, and what is built on it (pools, clients) lives as long as the process, so
a warm invocation reuses connections instead of opening them again.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import TypeVar

from app import errors, logs
from app.settings import config
from handlers import emf

T = TypeVar("T")

_loop: asyncio.AbstractEventLoop | None = None


def loop() -> asyncio.AbstractEventLoop:
    global _loop
    if _loop is None or _loop.is_closed():
        _loop = asyncio.new_event_loop()
    return _loop


def run(make: Callable[[], Awaitable[T]]) -> T:
    """Run one invocation; then its metrics go out as EMF log lines (handlers/emf.py)."""
    try:
        return loop().run_until_complete(make())
    finally:
        emf.flush()


def load_settings() -> config.Settings:
    """The function's settings, at cold start: bad configuration fails it, naming the
    variable. (The RDS secret is read at the first connection: app.transport.secrets.)"""
    settings = config.load()
    if settings.transport != "sqs":
        # Lambda's event source mappings read SQS; the Redis carrier runs as processes
        # (tasklease worker, tasklease sweep) beside a Redis server.
        raise errors.ConfigError(
            f"TASKLEASE_TRANSPORT={settings.transport}: the Lambda handlers run on SQS only; "
            "run `tasklease worker` and `tasklease sweep` for the Redis carrier "
            "(docs/explain/design.md#redis)"
        )
    logs.setup(settings.log_level)
    return settings
