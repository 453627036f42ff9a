"""Each kind's dependencies, built once per process from its factory and closed together.

A deps object that holds resources (an HTTP client) says how to close them with an
``aclose()`` or ``close()`` method (sync or async); closing the engine calls it.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterable
from typing import Any

from app.kinds.kind import Kind
from app.settings.config import Settings


class Deps:
    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        # Keyed by factory: kinds that share a factory share one deps object.
        self._built: dict[Callable[..., Any], Any] = {}

    async def open(self, kinds: Iterable[Kind[Any, Any, Any]]) -> None:
        """Build every kind's deps now, so a bad configuration stops start-up."""
        for k in kinds:
            await self.get(k)

    async def get(self, kind: Kind[Any, Any, Any]) -> Any:
        """The kind's deps; built here only for a kind registered after open()."""
        if kind.deps is None:
            return None
        if kind.deps not in self._built:
            self._built[kind.deps] = await kind.build_deps(self.settings)
        return self._built[kind.deps]

    async def aclose(self) -> None:
        built, self._built = list(self._built.values()), {}
        for deps in built:
            await close(deps)


async def close(deps: Any) -> None:
    """Call the deps object's ``aclose()`` or ``close()``, if it has one."""
    method = getattr(deps, "aclose", None) or getattr(deps, "close", None)
    if callable(method):
        done = method()
        if inspect.isawaitable(done):
            await done
