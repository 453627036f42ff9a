"""The registry of job kinds: the modules TASKLEASE_KINDS names, and nothing else.

There are no built-in kinds: the demos (``app.demos``) are loaded like any user's kinds,
by naming them (``TASKLEASE_KINDS=app.demos``; ``make run`` does that for you).

A module is searched for the ``Kind`` objects ``@kind`` returned; importing it is
all it takes to define them, so the registry imports its kinds and never the other
way round. A module that does not import, or a kind name defined twice, is a
ConfigError naming it: the process does not start with a kind missing.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from app import errors
from app.kinds.kind import Kind
from app.settings import config

AnyKind = Kind[Any, Any, Any]


class Registry(Mapping[str, AnyKind]):
    """Kinds by name. Reading it loads TASKLEASE_KINDS on first use."""

    def __init__(self) -> None:
        self._kinds: dict[str, AnyKind] = {}
        self._origin: dict[str, str] = {}
        self._modules: set[str] = set()
        self._ready = False

    def load(self, modules: Iterable[str] = ()) -> None:
        """Import ``modules`` (once each) and register their kinds."""
        self._ready = True
        for name in modules:
            if name in self._modules:
                continue
            found = _kinds_of(name)
            if not found:
                raise errors.ConfigError(f"TASKLEASE_KINDS: module {name!r} defines no job kind")
            for k in found:
                # A module that imports another's kind holds the same object: one kind.
                if self._kinds.get(k.name) is not k:
                    self.register(k, origin=name)
            self._modules.add(name)

    def register(self, kind: AnyKind, *, origin: str = "register()") -> AnyKind:
        if kind.name in self._kinds:
            raise errors.ConfigError(
                f"job kind {kind.name!r} is registered twice: "
                f"by {self._origin[kind.name]} and by {origin}"
            )
        self._kinds[kind.name] = kind
        self._origin[kind.name] = origin
        return kind

    def get_kind(self, name: str) -> AnyKind:
        """The kind called ``name``, or BadRequest naming the known kinds."""
        try:
            return self[name]
        except KeyError:
            if not self:
                raise errors.BadRequest(
                    f"unknown job kind {name!r}: this deployment has no job kinds "
                    "(TASKLEASE_KINDS names none)"
                ) from None
            known = ", ".join(sorted(self))
            raise errors.BadRequest(f"unknown job kind {name!r}; known kinds: {known}") from None

    def _ensure(self) -> None:
        if not self._ready:
            self.load(config.load().kind_modules)

    def __getitem__(self, name: str) -> AnyKind:
        self._ensure()
        return self._kinds[name]

    def __iter__(self) -> Iterator[str]:
        self._ensure()
        return iter(dict(self._kinds))

    def __len__(self) -> int:
        self._ensure()
        return len(self._kinds)


def _kinds_of(module: str) -> list[AnyKind]:
    try:
        loaded = importlib.import_module(module)
    except errors.ConfigError:
        raise  # a kind declared wrongly says so itself
    except Exception as exc:
        raise errors.ConfigError(
            f"TASKLEASE_KINDS: module {module!r} does not import: {type(exc).__name__}: {exc}"
        ) from exc
    return [v for v in vars(loaded).values() if isinstance(v, Kind)]
