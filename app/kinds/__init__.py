"""Job kinds inside tasklease: the decorator, the context, the registry.

Users import these from the public ``tasklease`` package; this is the implementation.

```python
from tasklease import JobContext, kind

@kind("support.triage", timeout_seconds=300, max_attempts=5, deps=build_triage_deps)
async def triage(ctx: JobContext[TriageDeps], ticket: Ticket) -> TriageResult: ...
```

Raise ``Retry(delay=...)`` to be retried after a delay, ``PermanentError`` to stop
retrying; any other exception is retried with backoff. ``tasklease.testing`` runs a
kind in memory. The kinds a process knows are those of the modules named in
TASKLEASE_KINDS, and no others: there are no built-in kinds (the demos are
``TASKLEASE_KINDS=app.demos``).
"""

from __future__ import annotations

import logging
from typing import Any

from app.errors import PermanentError, Retry
from app.kinds.context import JobContext
from app.kinds.deps import Deps
from app.kinds.kind import Kind, kind
from app.kinds.registry import Registry
from app.settings.config import Settings

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
log = logging.getLogger("tasklease.kinds")


def load(settings: Settings) -> None:
    """Load TASKLEASE_KINDS now: a bad module stops start-up here; none at all is said."""
    REGISTRY.load(settings.kind_modules)
    if not REGISTRY:
        log.warning(
            "no job kinds: TASKLEASE_KINDS is empty, so every submission is refused as an "
            "unknown kind; set it to the modules that define your kinds "
            "(e.g. TASKLEASE_KINDS=myproject.kinds, or app.demos for the demos)"
        )


def get(name: str) -> Kind[Any, Any, Any]:
    """The kind called ``name``, or BadRequest naming the known kinds."""
    return REGISTRY.get_kind(name)


def register(k: Kind[Any, Any, Any]) -> Kind[Any, Any, Any]:
    """Add a kind defined outside a module TASKLEASE_KINDS lists (tests, embedding)."""
    return REGISTRY.register(k)
