"""The running ``make run`` stack's connection settings, kept in ``.tasklease/dev.json``.

``tasklease dev`` writes the file (mode 0600: it holds the demo key) once its stack
is up and removes it when it stops. A command run from the checkout with none of
the connection variables set (``CONNECTION``) uses the file's settings, and
``tasklease env`` prints them as export lines. A file whose process is gone (a
``make run`` killed with SIGKILL) is stale and is never used.
"""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

DATA_DIR = Path(".tasklease")
FILE_NAME = "dev.json"
# Any of these set in the environment means it names its own deployment: the file is ignored.
CONNECTION = (
    "TASKLEASE_DATABASE_URL",
    "TASKLEASE_DATABASE_SECRET_ARN",
    "TASKLEASE_QUEUE_URL",
    "TASKLEASE_DLQ_URL",
    "TASKLEASE_QUEUE_URL_HIGH",
    "TASKLEASE_DLQ_URL_HIGH",
    "TASKLEASE_QUEUE_URL_LOW",
    "TASKLEASE_DLQ_URL_LOW",
    "TASKLEASE_TRANSPORT",
    "TASKLEASE_REDIS_URL",
)


@dataclass(frozen=True)
class Running:
    """What the state file says: the ``make run`` process and its settings."""

    path: Path
    pid: int
    env: dict[str, str]
    alive: bool


def cli_name() -> str:
    """How a second shell runs this CLI, to print in hints: the virtual environment's
    script (``.venv/bin/tasklease`` from the checkout), which needs neither ``uv`` on
    ``PATH`` nor an activated environment; ``tasklease`` where there is none."""
    script = Path(sys.executable).parent / "tasklease"
    if not script.exists():
        return "tasklease"
    try:
        return shlex.quote(str(script.relative_to(Path.cwd())))
    except ValueError:
        return shlex.quote(str(script))


def path(data_dir: Path = DATA_DIR) -> Path:
    return data_dir / FILE_NAME


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # somebody else's process: alive
    return True


def write(data_dir: Path, env: dict[str, str]) -> Path:
    """The file, replaced atomically, readable by this user only."""
    return write_private(path(data_dir), json.dumps({"pid": os.getpid(), "env": env}, indent=2))


def write_private(target: Path, text: str) -> Path:
    """``target`` holding ``text``, replaced atomically, readable by this user only."""
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_suffix(".tmp")
    with contextlib.suppress(FileNotFoundError):
        tmp.unlink()
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as fh:
        fh.write(text)
    os.replace(tmp, target)
    return target


def read(data_dir: Path = DATA_DIR) -> Running | None:
    """The state file's content, or None when there is none (or it is not ours to read)."""
    target = path(data_dir)
    try:
        doc = json.loads(target.read_text())
        pid = int(doc["pid"])
        env = {str(k): str(v) for k, v in dict(doc["env"]).items()}
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return Running(target, pid, env, _alive(pid))


def remove(data_dir: Path) -> None:
    """The file, if this process wrote it."""
    running = read(data_dir)
    if running is not None and running.pid == os.getpid():
        running.path.unlink(missing_ok=True)


def kinds_env(environ: Mapping[str, str]) -> dict[str, str]:
    """TASKLEASE_KINDS and PYTHONPATH (its entries made absolute) as this process has them:
    what a second shell needs to import the same kinds."""
    found = {}
    if environ.get("TASKLEASE_KINDS"):
        found["TASKLEASE_KINDS"] = environ["TASKLEASE_KINDS"]
    if environ.get("PYTHONPATH"):
        entries = [str(Path(e).resolve()) for e in environ["PYTHONPATH"].split(os.pathsep) if e]
        found["PYTHONPATH"] = os.pathsep.join(entries)
    return found


def export_lines(env: dict[str, str]) -> str:
    """``export NAME=value`` lines, quoted for a POSIX shell, one per setting."""
    return "".join(f"export {k}={shlex.quote(v)}\n" for k, v in env.items())


def apply(environ: dict[str, str] | os._Environ[str], data_dir: Path = DATA_DIR) -> str | None:
    """Put a running ``make run``'s settings into ``environ`` when it names no deployment of
    its own; the one line to tell the operator, or None when nothing was used."""
    if any(environ.get(name) for name in CONNECTION):
        return None
    running = read(data_dir)
    if running is None:
        return None
    if not running.alive:
        return (
            f"ignoring {running.path}: the `make run` that wrote it (pid {running.pid}) "
            "is not running"
        )
    for name, value in running.env.items():
        # The stack's SQS endpoint, region and credentials belong with its queue URLs.
        if name.startswith("AWS_") or not environ.get(name):
            environ[name] = value
    # The folders the stack imported its kinds from: importable here too (PYTHONPATH in
    # the environment is read only when an interpreter starts).
    for entry in reversed(running.env.get("PYTHONPATH", "").split(os.pathsep)):
        if entry and entry not in sys.path:
            sys.path.insert(0, entry)
    return f"using the running `make run` stack's settings from {running.path}"
