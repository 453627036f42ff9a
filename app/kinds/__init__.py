"""Job kinds, registered in one place with their payload schema, retry budget and timeout."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import pydantic

from app import errors
from app.kinds.context import JobContext

Run = Callable[[JobContext, Any], Awaitable[Any]]


@dataclass(frozen=True)
class Kind:
    name: str
    payload: type[pydantic.BaseModel]
    run: Run
    description: str
    max_attempts: int | None = None  # None: the deployment's TASKLEASE_MAX_ATTEMPTS
    timeout_seconds: int | None = None  # None: TASKLEASE_DEFAULT_JOB_TIMEOUT_SECONDS

    def parse(self, payload: Any) -> pydantic.BaseModel:
        """The payload as the kind's model, or BadRequest naming the fields that are wrong."""
        try:
            return self.payload.model_validate(payload)
        except pydantic.ValidationError as exc:
            problems = "; ".join(
                f"payload.{'.'.join(str(p) for p in e['loc']) or '(root)'}: {e['msg']}"
                for e in exc.errors()
            )
            raise errors.BadRequest(f"invalid payload for kind {self.name!r}: {problems}") from exc


REGISTRY: dict[str, Kind] = {}


def register(kind: Kind) -> Kind:
    if kind.name in REGISTRY:
        raise RuntimeError(f"job kind {kind.name!r} is registered twice")
    REGISTRY[kind.name] = kind
    return kind


def get(name: str) -> Kind:
    try:
        return REGISTRY[name]
    except KeyError:
        known = ", ".join(sorted(REGISTRY))
        raise errors.BadRequest(f"unknown job kind {name!r}; known kinds: {known}") from None


def _load_builtin() -> None:
    from app.kinds import demo, triage  # noqa: F401 - registering is the import's effect


_load_builtin()
