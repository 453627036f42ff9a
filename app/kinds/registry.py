"""The registry of job kinds: the built-ins and the modules TASKLEASE_KINDS names.

A module is searched for the ``Kind`` objects ``@kind`` returned; importing it is
all it takes to define them, so the registry imports its kinds and never the other
way round. A module that does not import, or a kind name defined twice, is a
ConfigError naming it: the process does not start with a kind missing.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from app import config, errors
from app.kinds.kind import Kind

BUILTIN = ("app.kinds.demo", "app.kinds.triage", "app.kinds.research", "app.kinds.writer")

AnyKind = Kind[Any, Any, Any]


class Registry(Mapping[str, AnyKind]):
    """Kinds by name. Reading it loads the built-ins and TASKLEASE_KINDS on first use."""

    def __init__(self, builtin: Iterable[str] = BUILTIN) -> None:
        self._builtin = tuple(builtin)
        self._kinds: dict[str, AnyKind] = {}
        self._origin: dict[str, str] = {}
        self._modules: set[str] = set()
        self._ready = False

    def load(self, modules: Iterable[str] = ()) -> None:
        """Import the built-ins and ``modules`` (once each) and register their kinds."""
        self._ready = True
        for name in (*self._builtin, *modules):
            if name in self._modules:
                continue
            found = _kinds_of(name)
            if not found and name not in self._builtin:
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
