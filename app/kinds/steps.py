"""A recorded step's shape, and the checks that catch a replay diverging from its record.

Each step is recorded with its shape: what kind of step it is (``effect``,
``model_call``, ``sleep``, ``callback``, ``notify``, ``spawn <kind>``, ``gather``,
``receive``, ``patch``), and, for a step recorded inside another step's function (a
receive's timeout inside its receive), `` within <that step's key>``. Replay matches
steps by key; the shape says whether the code reaching a key is the code that recorded
it. Two divergences stop the job (ReplayDiverged, a PermanentError: dead-lettered):

- the code reaches a recorded key as a step of another shape (before anything of the
  step runs: a recorded step never runs twice);
- the code returns while recorded steps were never reached (before the result is
  stored: no recorded step is skipped silently).

Not checked: steps recorded before shapes were (their shape is NULL), and patch markers
(``ctx.patched``: a marker records no side effect, so code that no longer asks skips
nothing). A step renamed in new code is a new step: it runs, and the old name is
reported as never reached when the code returns; use ``ctx.patched`` to rename.
"""

from __future__ import annotations

import contextvars
from collections.abc import Iterable, Mapping, Set

from app import errors

EFFECT, MODEL_CALL, PATCH = "effect", "model_call", "patch"
SLEEP, CALLBACK, NOTIFY, GATHER, RECEIVE = "sleep", "callback", "notify", "gather", "receive"
WITHIN = " within "

# The key of the step whose function is running in this task (None: none): a step
# recorded meanwhile is inside it. A context variable, so concurrent steps of one job
# (asyncio.gather) are not taken for nested ones.
_open: contextvars.ContextVar[str | None] = contextvars.ContextVar("open_step", default=None)


def spawn(kind: str) -> str:
    return f"spawn {kind}"


def shape_here(shape: str) -> str:
    """``shape`` as recorded here: inside the step whose function is running, if any."""
    outer = _open.get()
    return shape if outer is None else f"{shape}{WITHIN}{outer}"


def opened(key: str) -> contextvars.Token[str | None]:
    """Mark step ``key``'s function as running in this task (``closed`` ends it)."""
    return _open.set(key)


def closed(token: contextvars.Token[str | None]) -> None:
    _open.reset(token)


def version_name(version: str | None) -> str:
    return f"version {version}" if version is not None else "a version not recorded"


def check_reached(
    key: str, recorded: str | None, current: str, *, started: str | None, running: str | None
) -> None:
    """A recorded step reached again: ReplayDiverged when its shape is not the one it was
    recorded with (a step recorded before shapes were is not checked)."""
    if recorded is None or recorded == current:
        return
    raise errors.ReplayDiverged(
        f"replay diverged at step {key!r}: recorded as {recorded} by the job's "
        f"{version_name(started)}, reached as {current} by {version_name(running)}; "
        "nothing of it ran again (docs/howto/kind-versions.md)"
    )


def unreached(
    recorded: Iterable[str],
    shapes: Mapping[str, str | None],
    reached: Set[str],
    *,
    unshaped: bool = False,
) -> list[str]:
    """The recorded steps (in recorded order) this run did not reach and should have: a
    step inside a reached step counts as reached with it; patch markers are not checked,
    nor steps recorded without a shape (before migration 0029) unless ``unshaped``: for
    ``ctx.patched`` such a step beyond the patch's point still means the job passed it."""
    missing: list[str] = []
    for key in recorded:
        shape = shapes.get(key)
        if key in reached or shape == PATCH or (shape is None and not unshaped):
            continue
        if shape is None:
            missing.append(key)
            continue
        _, within, outer = shape.partition(WITHIN)
        if within and outer in reached:
            continue
        missing.append(key)
    return missing


def check_finished(
    missing: list[str],
    shapes: Mapping[str, str | None],
    *,
    started: str | None,
    running: str | None,
) -> None:
    """The code returned: ReplayDiverged naming the first recorded step it never reached."""
    if not missing:
        return
    first = missing[0]
    more = f" (and {len(missing) - 1} more)" if len(missing) > 1 else ""
    raise errors.ReplayDiverged(
        f"replay diverged: the code ({version_name(running)}) returned without reaching "
        f"recorded step {first!r}{more}, recorded as {shapes.get(first)} by the job's "
        f"{version_name(started)}; the result was not stored (docs/howto/kind-versions.md)"
    )
