"""`tasklease dev` (make run) refuses a TASKLEASE_KINDS module that does not import
before it starts anything, naming it (instead of an API that dies into its log)."""

from __future__ import annotations

from pathlib import Path

import pytest

from app import config
from app.stack import dev

pytestmark = pytest.mark.unit


def test_a_kinds_module_that_does_not_import_stops_make_run_naming_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    settings = config.load(kinds="tests.no_such_kinds_module")
    code = dev.main(
        settings,
        workers=1,
        api_port=1,
        data_dir=tmp_path / "data",
        demo=True,
        exit_when_done=True,
    )
    assert code == 2
    assert "tests.no_such_kinds_module" in capsys.readouterr().out
    assert not (tmp_path / "data" / "pgdata").exists()  # nothing was started
