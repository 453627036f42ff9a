"""A job kind: its name, payload model, result type, budgets and dependency factory,
read off an annotated ``async def`` by the ``@kind`` decorator.

```python
@kind("support.triage", timeout_seconds=300, deps=build_triage_deps)
async def triage(ctx: JobContext[TriageDeps], ticket: Ticket) -> TriageResult: ...
```
"""

from __future__ import annotations

import inspect
import re
import typing
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Generic, Literal, TypedDict, TypeVar, Unpack, overload

import pydantic

from app import errors
from app.kinds import flow as flow_control
from app.kinds.context import JobContext
from app.settings import bounds
from app.settings.config import Settings

D = TypeVar("D")
P = TypeVar("P", bound=pydantic.BaseModel)
R = TypeVar("R")

Run = Callable[[JobContext[D], P], Awaitable[R]]

# What a job whose kind changed while it waited does (docs/howto/kind-versions.md):
# "resume" on the code deployed now, its replay checked (app/kinds/steps.py); "pin" to
# the version it started on, run only by a worker that serves that version.
OnVersionChange = Literal["resume", "pin"]
ON_VERSION_CHANGE: tuple[OnVersionChange, ...] = ("resume", "pin")
DEFAULT_VERSION = "1"
# A version: a short name, as a Lambda alias or a tag would be ("2", "2026-06-01", "v3.1").
VERSION = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,31}")


@dataclass(frozen=True, eq=False)
class Kind(Generic[D, P, R]):
    name: str
    payload: type[P]
    run: Run[D, P, R]
    description: str
    result: pydantic.TypeAdapter[R]
    # Builds the kind's dependencies from the settings, once per process; sync or async.
    deps: Callable[[Settings], D | Awaitable[D]] | None = None
    max_attempts: int | None = None  # None: the deployment's TASKLEASE_MAX_ATTEMPTS
    timeout_seconds: int | None = None  # None: TASKLEASE_DEFAULT_JOB_TIMEOUT_SECONDS
    deadline_seconds: float | None = None  # the whole run's, from its submission; None: none
    version: str = DEFAULT_VERSION  # the code's version, recorded on a job at its first start
    on_version_change: OnVersionChange = "resume"
    flow: flow_control.Flow = flow_control.NO_FLOW  # its key and limits per key

    def parse(self, payload: Any) -> P:
        """The payload as the kind's model, or BadRequest naming the fields that are wrong."""
        try:
            return self.payload.model_validate(payload)
        except pydantic.ValidationError as exc:
            problems = "; ".join(
                f"payload.{'.'.join(str(p) for p in e['loc']) or '(root)'}: {e['msg']}"
                for e in exc.errors()
            )
            raise errors.BadRequest(f"invalid payload for kind {self.name!r}: {problems}") from exc

    def check_result(self, value: Any) -> R:
        """The kind's return value validated against its return annotation."""
        try:
            return self.result.validate_python(value)
        except pydantic.ValidationError as exc:
            # The code returned what it did not declare: another attempt returns it again.
            raise errors.PermanentError(
                f"kind {self.name!r} returned a value that is not its declared result: "
                f"{exc.error_count()} error(s), first: {exc.errors()[0]['msg']}"
            ) from exc

    def to_json(self, result: R) -> Any:
        return self.result.dump_python(result, mode="json")

    async def execute(self, ctx: JobContext[D], payload: P) -> Any:
        """Run the kind and return its result as the JSON to store."""
        value = await self.run(ctx, payload)
        ctx._finished()
        return self.to_json(self.check_result(value))

    async def build_deps(self, settings: Settings) -> D | None:
        """A fresh deps object from the kind's factory (None without one)."""
        if self.deps is None:
            return None
        made = self.deps(settings)
        return await made if inspect.isawaitable(made) else made


class KindOptions(TypedDict, total=False):
    """What ``@kind`` takes besides the name and the deps factory."""

    description: str | None
    timeout_seconds: int | None  # None: TASKLEASE_DEFAULT_JOB_TIMEOUT_SECONDS
    max_attempts: int | None  # None: TASKLEASE_MAX_ATTEMPTS
    deadline_seconds: float | None  # a job's deadline unless its submission gives one
    version: str | int  # this code's version (default "1"): docs/howto/kind-versions.md
    # Flow control by key (docs/howto/flow-control.md): a job's key from its payload, and
    # the limits per key.
    key: Callable[[Any], Any] | None
    concurrency: int | None
    if_active: flow_control.IfActive
    debounce_seconds: float | None
    rate: flow_control.Rate | tuple[int, float] | None
    on_version_change: OnVersionChange  # "resume" (default) or "pin"


@overload
def kind(
    name: str, *, deps: Callable[[Settings], Awaitable[D]], **options: Unpack[KindOptions]
) -> Callable[[Run[D, P, R]], Kind[D, P, R]]: ...


@overload
def kind(
    name: str, *, deps: Callable[[Settings], D], **options: Unpack[KindOptions]
) -> Callable[[Run[D, P, R]], Kind[D, P, R]]: ...


@overload
def kind(
    name: str, **options: Unpack[KindOptions]
) -> Callable[[Run[None, P, R]], Kind[None, P, R]]: ...


def kind(
    name: str,
    *,
    deps: Callable[[Settings], Any] | None = None,
    **options: Unpack[KindOptions],
) -> Callable[[Run[Any, Any, Any]], Kind[Any, Any, Any]]:
    """Declare ``fn`` a job kind. The payload model is the annotation of its second
    parameter, the result type its return annotation; ``description`` defaults to the
    first line of its docstring. A module listed in TASKLEASE_KINDS is searched for
    the kinds this returns: defining one is registering it.

    ``version`` (an int or a short name, default "1") is recorded on a job at its first
    start; ``on_version_change`` says what a job started on another version does:
    "resume" on this code, its replay checked, or "pin" to its own version
    (docs/howto/kind-versions.md)."""

    _check_bounds(name, options)
    version = checked_version(name, options.get("version", DEFAULT_VERSION))
    policy = options.get("on_version_change", "resume")
    if policy not in ON_VERSION_CHANGE:
        raise errors.ConfigError(
            f"kind {name!r}: on_version_change={policy!r} is not one of "
            + ", ".join(repr(p) for p in ON_VERSION_CHANGE)
        )

    flow = flow_control.checked(
        name,
        key=options.get("key"),
        concurrency=options.get("concurrency"),
        if_active=options.get("if_active", "enqueue"),
        debounce_seconds=options.get("debounce_seconds"),
        rate=options.get("rate"),
    )

    def declare(fn: Run[Any, Any, Any]) -> Kind[Any, Any, Any]:
        payload, returns = _annotations(name, fn)
        doc = (inspect.getdoc(fn) or "").strip().splitlines()
        return Kind(
            name=name,
            payload=payload,
            run=fn,
            description=options.get("description") or (doc[0] if doc else name),
            result=pydantic.TypeAdapter(returns),
            deps=deps,
            max_attempts=options.get("max_attempts"),
            timeout_seconds=options.get("timeout_seconds"),
            deadline_seconds=options.get("deadline_seconds"),
            version=version,
            on_version_change=policy,
            flow=flow,
        )

    return declare


def checked_version(name: str, version: object) -> str:
    """The version as the text recorded on jobs, or ConfigError saying what is allowed."""
    if isinstance(version, int) and not isinstance(version, bool) and version >= 0:
        version = str(version)
    if not isinstance(version, str) or not VERSION.fullmatch(version):
        raise errors.ConfigError(
            f"kind {name!r}: version={version!r} must be an int of 0 or more or 1 to 32 "
            "letters, digits, '.', '_' or '-' starting with a letter or digit"
        )
    return version


def _check_bounds(name: str, options: KindOptions) -> None:
    """A budget or timeout the jobs table would refuse stops start-up, not a submission."""
    checks = (
        ("max_attempts", options.get("max_attempts"), bounds.MIN_ATTEMPTS, bounds.MAX_ATTEMPTS),
        (
            "timeout_seconds",
            options.get("timeout_seconds"),
            bounds.MIN_TIMEOUT_SECONDS,
            bounds.MAX_TIMEOUT_SECONDS,
        ),
        ("deadline_seconds", options.get("deadline_seconds"), 1, bounds.MAX_DEADLINE_SECONDS),
    )
    for option, value, low, high in checks:
        if value is not None and not low <= value <= high:
            raise errors.ConfigError(f"kind {name!r}: {option}={value} is outside {low} to {high}")


def _annotations(name: str, fn: Callable[..., Any]) -> tuple[type[pydantic.BaseModel], Any]:
    """The payload model and the result type, or ConfigError saying what is missing."""
    try:
        hints = typing.get_type_hints(fn)
    except NameError as exc:
        raise errors.ConfigError(f"kind {name!r}: an annotation does not resolve: {exc}") from exc
    params = list(inspect.signature(fn).parameters)
    if not inspect.iscoroutinefunction(fn) or len(params) != 2:
        raise errors.ConfigError(f"kind {name!r}: must be `async def f(ctx, payload) -> Result`")
    payload = hints.get(params[1])
    if not (isinstance(payload, type) and issubclass(payload, pydantic.BaseModel)):
        raise errors.ConfigError(
            f"kind {name!r}: the payload parameter must be annotated with a pydantic model"
        )
    if "return" not in hints:
        raise errors.ConfigError(f"kind {name!r}: the function needs a return annotation")
    return payload, hints["return"]
