"""The registry of job kinds: the modules TASKLEASE_KINDS names, and nothing else.

There are no built-in kinds: the demos (``app.demos``) are loaded like any user's kinds,
by naming them (``TASKLEASE_KINDS=app.demos``; ``make run`` does that for you).

A module is searched for the ``Kind`` objects ``@kind`` returned; importing it is
all it takes to define them, so the registry imports its kinds and never the other
way round. A module that does not import, or a kind name defined twice, is a
ConfigError naming it: the process does not start with a kind missing.

A name may be served in several versions side by side (``@kind(name, version=...,
on_version_change="pin")`` each): a job runs on the version it started on, and a new
job starts on the newest (docs/howto/kind-versions.md).
"""

from __future__ import annotations

import importlib
import re
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from app import errors
from app.kinds.kind import Kind
from app.settings import config

AnyKind = Kind[Any, Any, Any]


class Registry(Mapping[str, AnyKind]):
    """Kinds by name. Reading it loads TASKLEASE_KINDS on first use."""

    def __init__(self) -> None:
        self._kinds: dict[str, AnyKind] = {}  # by name: the version new jobs start on
        self._versions: dict[str, dict[str, AnyKind]] = {}  # by name: every version served
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
                if all(v is not k for v in self._versions.get(k.name, {}).values()):
                    self.register(k, origin=name)
            self._modules.add(name)

    def register(self, kind: AnyKind, *, origin: str = "register()") -> AnyKind:
        served = self._versions.setdefault(kind.name, {})
        if served:
            twice = f"job kind {kind.name!r} is registered twice: by {self._origin[kind.name]} and by {origin}"
            if kind.version in served:
                raise errors.ConfigError(f"{twice}, both version {kind.version}")
            same = [v for v in served if version_order(v) == version_order(kind.version)]
            if same:  # "1" and "01": which would new jobs start on?
                raise errors.ConfigError(
                    f"{twice}: versions {same[0]} and {kind.version} compare equal (their "
                    "runs of digits as numbers), so neither is the newest: name them apart"
                )
            unpinned = [k for k in (kind, *served.values()) if k.on_version_change != "pin"]
            if unpinned:
                raise errors.ConfigError(
                    f"{twice}: versions served side by side must each be declared with "
                    f"on_version_change='pin' (version {unpinned[0].version} is not)"
                )
        served[kind.version] = kind
        self._kinds[kind.name] = max(served.values(), key=lambda k: version_order(k.version))
        self._origin[kind.name] = origin
        return kind

    def unregister(self, name: str) -> None:
        """Take kind ``name`` out, every version of it (tests; a kind redeployed in place)."""
        for held in (self._kinds, self._versions, self._origin):
            held.pop(name, None)

    def version_of(self, name: str, version: str) -> AnyKind | None:
        """Kind ``name`` in ``version``, if this process serves it."""
        self._ensure()
        return self._versions.get(name, {}).get(version)

    def every_version(self) -> list[AnyKind]:
        """Every kind this process serves, each of its versions (the mapping holds only the
        one new jobs start on)."""
        self._ensure()
        return [k for served in self._versions.values() for k in served.values()]

    def versions(self, name: str) -> list[str]:
        """The versions of kind ``name`` this process serves, oldest first."""
        self._ensure()
        return sorted(self._versions.get(name, {}), key=version_order)

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


def version_order(version: str) -> tuple[tuple[int, int | str], ...]:
    """A version's place among its kind's: its runs of digits compared as numbers, the
    rest as text ("2" < "10", "2026-06-01" < "2026-11-01", "v2" < "v10")."""
    return tuple(
        (0, int(part)) if part.isdigit() else (1, part) for part in re.findall(r"\d+|\D+", version)
    )


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
