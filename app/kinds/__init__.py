"""The public API for job kinds.

```python
from app.kinds import JobContext, kind

@kind("support.triage", timeout_seconds=300, max_attempts=5, deps=build_triage_deps)
async def triage(ctx: JobContext[TriageDeps], ticket: Ticket) -> TriageResult: ...
```

Raise ``Retry(delay=...)`` to be retried after a delay, ``PermanentError`` to stop
retrying; any other exception is retried with backoff. ``app.kinds.testing`` runs a
kind in memory. The kinds a process knows are the built-ins and the modules named in
TASKLEASE_KINDS (see examples/README.md).
"""

from __future__ import annotations

from typing import Any

from app.config import Settings
from app.errors import PermanentError, Retry
from app.kinds.context import JobContext
from app.kinds.deps import Deps
from app.kinds.kind import Kind, kind
from app.kinds.registry import Registry

__all__ = [
    "REGISTRY",
    "Deps",
    "JobContext",
    "Kind",
    "PermanentError",
    "Registry",
    "Retry",
    "get",
    "kind",
    "load",
    "register",
]

REGISTRY = Registry()


def load(settings: Settings) -> None:
    """Load the built-in kinds and TASKLEASE_KINDS now: a bad module stops start-up here."""
    REGISTRY.load(settings.kind_modules)


def get(name: str) -> Kind[Any, Any, Any]:
    """The kind called ``name``, or BadRequest naming the known kinds."""
    return REGISTRY.get_kind(name)


def register(k: Kind[Any, Any, Any]) -> Kind[Any, Any, Any]:
    """Add a kind defined outside a module TASKLEASE_KINDS lists (tests, embedding)."""
    return REGISTRY.register(k)
