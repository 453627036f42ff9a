"""A second shell knows the running `make run`'s kinds (issue 30, item 4): the state file
carries TASKLEASE_KINDS and the folders they were imported from, so `tasklease submit
my.kind` in another shell validates with the same code the API runs."""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path

import pytest

from app.kinds.registry import Registry
from app.settings import config
from app.tools.stack import state

pytestmark = [pytest.mark.unit, pytest.mark.usefixtures("clean_env")]

KIND = """
from pydantic import BaseModel
from tasklease import JobContext, kind

class P(BaseModel):
    n: int

@kind("mine.double")
async def double(ctx: JobContext[None], p: P) -> int:
    return 2 * p.n
"""


def test_the_state_file_carries_the_kinds_and_where_they_come_from(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "src").mkdir()
    env = state.kinds_env({"TASKLEASE_KINDS": "mykinds,app.demos", "PYTHONPATH": "src"})
    assert env == {"TASKLEASE_KINDS": "mykinds,app.demos", "PYTHONPATH": str(tmp_path / "src")}
    assert state.kinds_env({}) == {}


def test_a_second_shell_imports_the_running_stack_s_kinds(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a running `make run` (this process stands in for it) that loaded its kinds
    # from a folder of the user's, named on PYTHONPATH
    kinds_dir = tmp_path / "src"
    kinds_dir.mkdir()
    (kinds_dir / "second_shell_kinds.py").write_text(textwrap.dedent(KIND))
    monkeypatch.setattr(sys, "path", list(sys.path))  # put back after the test
    data_dir = tmp_path / ".tasklease"
    written = {
        "TASKLEASE_DATABASE_URL": "postgresql://127.0.0.1:1/x",
        **state.kinds_env({"TASKLEASE_KINDS": "second_shell_kinds", "PYTHONPATH": str(kinds_dir)}),
    }
    state.write(data_dir, written)

    # When a second shell, with no setting of its own, runs a command
    environ: dict[str, str] = {}
    note = state.apply(environ, data_dir)

    # Then it has the stack's kinds, importable from where the stack took them
    assert note and "using the running `make run` stack's settings" in note
    assert environ["TASKLEASE_KINDS"] == "second_shell_kinds"
    assert str(kinds_dir) in sys.path
    monkeypatch.setenv("TASKLEASE_KINDS", environ["TASKLEASE_KINDS"])
    registry = Registry()
    registry.load(config.load().kind_modules)
    assert registry.get_kind("mine.double").parse({"n": 2}).n == 2
