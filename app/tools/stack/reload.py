"""``make run ARGS=--reload``: notice when the code of the kinds changes (issue 30, item 6).

The files watched are those the kinds were loaded from: each module TASKLEASE_KINDS
names (the demos' ``app.demos`` among them when ``make run`` runs the demo), a package
with every ``.py`` file under its folder, a single-file module with the ``.py`` files
beside it (its folder alone, not below: that folder may be a whole project, with
``.tasklease/`` and a virtual environment in it). watchfiles does the watching (the OS's
notifications, as uvicorn's own --reload uses it) in two threads; ``changed`` collects
what they saw, and the caller restarts the processes that import the kinds
(``DevStack.reload``).
"""

from __future__ import annotations

import importlib
import logging
import queue
import subprocess
import sys
import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

log = logging.getLogger("tasklease.dev")


@dataclass(frozen=True)
class Watched:
    """What to watch: package folders (with their subfolders) and folders of single-file
    modules (without theirs)."""

    trees: tuple[Path, ...] = ()
    folders: tuple[Path, ...] = ()

    def describe(self) -> str:
        return " ".join(str(p) for p in (*self.trees, *self.folders))


def watched(modules: Iterable[str]) -> Watched:
    """Where the kinds of ``modules`` were loaded from (each is imported, as the kinds'
    loading already did)."""
    trees: dict[Path, None] = {}
    folders: dict[Path, None] = {}
    for name in modules:
        module = importlib.import_module(name)
        if getattr(module, "__path__", None):  # a package: its folder(s), all the way down
            trees.update(dict.fromkeys(Path(p).resolve() for p in module.__path__))
        elif module.__file__:
            folders[Path(module.__file__).resolve().parent] = None
    return Watched(tuple(trees), tuple(f for f in folders if f not in trees))


@dataclass
class KindWatcher:
    """Threads that watch ``where`` for changed ``.py`` files until ``stop``."""

    where: Watched
    _seen: queue.SimpleQueue[Path] = field(default_factory=queue.SimpleQueue)
    _stop: threading.Event = field(default_factory=threading.Event)
    _threads: list[threading.Thread] = field(default_factory=list)

    def start(self) -> None:
        for paths, recursive in ((self.where.trees, True), (self.where.folders, False)):
            if paths:
                thread = threading.Thread(
                    target=self._watch, args=(paths, recursive), name="kinds-watch", daemon=True
                )
                thread.start()
                self._threads.append(thread)

    def _watch(self, paths: tuple[Path, ...], recursive: bool) -> None:
        import watchfiles  # the embedded extra's, as make run's other servers

        # Its "1 change detected" at INFO is said by the reload's own line.
        logging.getLogger("watchfiles").setLevel(logging.WARNING)
        try:
            for changes in watchfiles.watch(
                *paths,
                watch_filter=watchfiles.PythonFilter(),
                recursive=recursive,
                stop_event=self._stop,
                raise_interrupt=False,
            ):
                for _, changed in changes:
                    self._seen.put(Path(changed))
        except Exception:  # e.g. out of inotify watches: say so, make run goes on
            log.exception("--reload stopped watching %s", " ".join(map(str, paths)))

    def changed(self) -> list[Path]:
        """The files changed since the last call (each once), or none."""
        found: dict[Path, None] = {}
        while not self._seen.empty():
            found[self._seen.get_nowait()] = None
        return list(found)

    def stop(self) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout=5)


def load_error(env: Mapping[str, str], cwd: Path) -> str | None:
    """Why TASKLEASE_KINDS does not load in a fresh interpreter with ``env`` (the
    processes' own), or None when it does: a broken edit is said once, here, instead of
    the API and every worker dying of it."""
    code = "from app import kinds; from app.settings import config; kinds.load(config.load())"
    done = subprocess.run(  # noqa: S603 - this interpreter, our own code
        [sys.executable, "-c", code],
        env=dict(env),
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    if done.returncode == 0:
        return None
    lines = [line for line in done.stderr.strip().splitlines() if line.strip()]
    return lines[-1] if lines else f"exit {done.returncode}"
