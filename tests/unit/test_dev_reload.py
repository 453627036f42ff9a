"""`make run ARGS=--reload` watches the files the kinds were loaded from (issue 30, item 6):
a package's folder with its subfolders, a single-file module's folder without them (it
may be a whole project, its .tasklease/ and virtual environment in it); only .py files
count; a kind module that no longer imports is named before any process is restarted."""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from app.tools.stack import reload
from app.tools.stack.stack import ROOT
from tests.conftest import wait_for

pytestmark = pytest.mark.unit

KIND = """
from pydantic import BaseModel
from tasklease import JobContext, kind


class P(BaseModel):
    pass


@kind("{name}")
async def k(ctx: JobContext[None], p: P) -> dict[str, int]:
    return {{"v": 1}}
"""


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A user's folder on sys.path: a package of kinds (with a subpackage) and a
    single-file kind module, beside a subfolder of other files."""
    (tmp_path / "reload_pkg" / "sub").mkdir(parents=True)
    (tmp_path / "reload_pkg" / "__init__.py").write_text(KIND.format(name="reload.pkg"))
    (tmp_path / "reload_pkg" / "sub" / "__init__.py").write_text("")
    (tmp_path / "reload_single.py").write_text(KIND.format(name="reload.single"))
    (tmp_path / "data").mkdir()
    monkeypatch.syspath_prepend(str(tmp_path))
    yield tmp_path
    for name in ("reload_pkg", "reload_pkg.sub", "reload_single"):
        sys.modules.pop(name, None)


def test_the_watched_folders_are_the_kinds_own(project: Path) -> None:
    where = reload.watched(["reload_pkg", "reload_single"])
    assert where.trees == (project / "reload_pkg",)
    assert where.folders == (project,)


def test_a_change_to_a_kind_s_py_file_is_seen_and_nothing_else(project: Path) -> None:
    watcher = reload.KindWatcher(reload.watched(["reload_pkg", "reload_single"]))
    watcher.start()
    try:
        seen: set[Path] = set()

        def write() -> None:
            (project / "reload_pkg" / "sub" / "deep.py").write_text("X = 1\n")
            (project / "reload_single.py").write_text(KIND.format(name="reload.single2"))
            (project / "data" / "ignored.py").write_text("")  # below a single module's folder
            (project / "notes.txt").write_text("not python")

        def both() -> bool:
            # Written again on every look: the watcher thread sets its watches when it
            # gets to it, and a write before then is never reported (a fixed sleep here
            # was a guess at how long that takes on a loaded machine).
            write()
            seen.update(watcher.changed())
            return {
                project / "reload_pkg" / "sub" / "deep.py",
                project / "reload_single.py",
            } <= seen

        wait_for(both, what="the two .py changes", timeout=20)
        time.sleep(2)  # watchfiles' debounce: anything else would have come by now
        seen.update(watcher.changed())
        assert seen == {project / "reload_pkg" / "sub" / "deep.py", project / "reload_single.py"}
    finally:
        watcher.stop()


def test_a_kind_module_that_no_longer_imports_is_named(project: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(project), "TASKLEASE_KINDS": "reload_single"}
    assert reload.load_error(env, ROOT) is None
    (project / "reload_single.py").write_text("def broken(:\n")
    problem = reload.load_error(env, ROOT)
    assert problem is not None
    assert "reload_single" in problem and "SyntaxError" in problem
