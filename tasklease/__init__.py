"""tasklease: durable jobs for long AI work on SQS (or Redis Streams), Lambda and PostgreSQL.

This package is the whole public surface; everything under ``app`` is the implementation
and may change between releases (docs/explain/public-api.md says what is stable).

```python
from pydantic import BaseModel
from tasklease import JobContext, kind


class Greeting(BaseModel):
    name: str


@kind("hello.greet", timeout_seconds=60, max_attempts=3)
async def greet(ctx: JobContext[None], p: Greeting) -> str:
    return await ctx.effect("greet", lambda: say_hello(p.name))
```

- ``tasklease.testing`` runs a kind in memory (``run_kind``), crashes included;
- ``tasklease.client`` is the HTTP client (``Client``, ``AsyncClient``); importing it
  loads none of the server's dependencies.

Names are loaded when first used, so ``import tasklease.client`` stays light.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from app import __version__

if TYPE_CHECKING:
    from app.errors import (
        CallbackFailed as CallbackFailed,
    )
    from app.errors import (
        CallbackTimedOut as CallbackTimedOut,
    )
    from app.errors import (
        ConfigError as ConfigError,
    )
    from app.errors import (
        GatherFailed as GatherFailed,
    )
    from app.errors import (
        JobError as JobError,
    )
    from app.errors import (
        PermanentError as PermanentError,
    )
    from app.errors import (
        ReceiveTimedOut as ReceiveTimedOut,
    )
    from app.errors import (
        ReplayDiverged as ReplayDiverged,
    )
    from app.errors import (
        Retry as Retry,
    )
    from app.errors import (
        TaskleaseError as TaskleaseError,
    )
    from app.errors import (
        Throttled as Throttled,
    )
    from app.kinds.context import JobContext as JobContext
    from app.kinds.flow import IfActive as IfActive
    from app.kinds.flow import Rate as Rate
    from app.kinds.generate import Usage as Usage
    from app.kinds.kind import Kind as Kind
    from app.kinds.kind import kind as kind
    from app.kinds.messages import Message as Message
    from app.kinds.waits import Gathered as Gathered
    from app.settings.config import Settings as Settings

# Each public name and the module that holds it; imported on first use (PEP 562).
_EXPORTS = {
    "kind": "app.kinds.kind",
    "Kind": "app.kinds.kind",
    "JobContext": "app.kinds.context",
    "Settings": "app.settings.config",
    "Usage": "app.kinds.generate",
    "Rate": "app.kinds.flow",
    "IfActive": "app.kinds.flow",
    "Gathered": "app.kinds.waits",
    "Message": "app.kinds.messages",
    "TaskleaseError": "app.errors",
    "ConfigError": "app.errors",
    "JobError": "app.errors",
    "Retry": "app.errors",
    "Throttled": "app.errors",
    "PermanentError": "app.errors",
    "CallbackFailed": "app.errors",
    "CallbackTimedOut": "app.errors",
    "GatherFailed": "app.errors",
    "ReceiveTimedOut": "app.errors",
    "ReplayDiverged": "app.errors",
}

__all__ = [
    "CallbackFailed",
    "CallbackTimedOut",
    "ConfigError",
    "GatherFailed",
    "Gathered",
    "IfActive",
    "JobContext",
    "JobError",
    "Kind",
    "Message",
    "PermanentError",
    "Rate",
    "ReceiveTimedOut",
    "ReplayDiverged",
    "Retry",
    "Settings",
    "TaskleaseError",
    "Throttled",
    "Usage",
    "__version__",
    "kind",
]


def __getattr__(name: str) -> Any:
    try:
        module = _EXPORTS[name]
    except KeyError:
        raise AttributeError(f"module 'tasklease' has no attribute {name!r}") from None
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # the next lookup is a plain attribute
    return value


def __dir__() -> list[str]:
    return sorted(__all__)
