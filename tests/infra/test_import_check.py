"""The import check `make package` and tests/infra/test_package.py run, without building
a zip: what counts as a clean import, and what a missing or broken interpreter does."""

from __future__ import annotations

import json
import subprocess
import zipfile
from pathlib import Path
from typing import Any

import pytest

from tests.infra import test_package
from tests.infra.test_package import script

pytestmark = pytest.mark.unit

imports = script("handler_imports")
packaging = script("package_lambda")
tool = script("arm64_python")
CLEAN = {"handlers.worker": "/x/handlers/worker.py", "psycopg_impl": "binary", "sys_path_extra": []}


@pytest.fixture
def zip_path(tmp_path: Path) -> Path:
    out = tmp_path / "lambda.zip"
    with zipfile.ZipFile(out, "w") as zf:
        zf.writestr("handlers/__init__.py", "")
    Path(str(out) + ".json").write_text("{}")
    return out


def check(monkeypatch: pytest.MonkeyPatch, out: Path, run: Any) -> str:
    """check_imports on ``out``, with ``run`` for what importing the handlers gives."""
    python = imports.Interpreter(["python3.13"], "python3.13 x86_64 (here)", False)
    monkeypatch.setattr(imports, "interpreter_for", lambda *args, **kwargs: python)
    monkeypatch.setattr(imports, "import_handlers", run)
    said: str = packaging.check_imports(out, "x86_64", "python3.13", [], False)
    return said


def printed(found: dict[str, object], code: int = 0) -> Any:
    return lambda *args: subprocess.CompletedProcess([], code, json.dumps(found) + "\n", "")


def test_a_clean_import_passes(monkeypatch: pytest.MonkeyPatch, zip_path: Path) -> None:
    assert check(monkeypatch, zip_path, printed(CLEAN)).startswith("imports cleanly under")
    assert zip_path.exists()


@pytest.mark.parametrize(
    ("found", "why"),
    [
        ({**CLEAN, "psycopg_impl": "python"}, "'python' implementation"),
        ({**CLEAN, "sys_path_extra": ["/usr/lib/python3/site-packages"]}, "site-packages"),
        ({"handlers.worker": "/x"}, "no result printed"),
    ],
)
def test_an_import_that_exits_0_but_is_not_clean_fails_and_drops_the_zip(
    monkeypatch: pytest.MonkeyPatch, zip_path: Path, found: dict[str, object], why: str
) -> None:
    # A broken psycopg_binary falls back to the pure-Python psycopg on a machine with
    # libpq, and imports; Lambda has no libpq.
    with pytest.raises(packaging.PackageError, match=why):
        check(monkeypatch, zip_path, printed(found))
    assert not zip_path.exists()


def test_an_import_that_hangs_is_a_package_error(
    monkeypatch: pytest.MonkeyPatch, zip_path: Path
) -> None:
    def hangs(*args: object) -> None:
        raise subprocess.TimeoutExpired(["python3.13"], 300)

    with pytest.raises(packaging.PackageError, match="took over 300 s"):
        check(monkeypatch, zip_path, hangs)


def test_a_built_emulator_that_does_not_run_says_to_rebuild(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(imports, "native_candidates", lambda version: [])
    monkeypatch.setattr(imports, "can_emulate", lambda arch, version: True)
    monkeypatch.setattr(tool, "build", lambda: ["/nonexistent/qemu-aarch64"])
    with pytest.raises(tool.Arm64PythonError, match="--rebuild"):
        imports.interpreter_for("arm64", "3.13", emulate=True)


@pytest.mark.parametrize(("machine", "arch"), [("aarch64", "arm64"), ("x86_64", "x86_64")])
def test_precompile_looks_for_a_python_of_this_machine(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, machine: str, arch: str
) -> None:
    asked: list[str] = []
    monkeypatch.setattr(imports.platform, "machine", lambda: machine)
    monkeypatch.setattr(imports, "native_candidates", lambda version: [["python3.13"]])
    monkeypatch.setattr(imports, "answers", lambda cmd, version, a: asked.append(a) or False)
    assert imports.precompile(tmp_path, "3.13") is False
    assert asked == [arch]


@pytest.mark.parametrize("in_ci", [False, True])
def test_no_gpgv_or_keyring_skips_the_package_tests_outside_ci_and_fails_in_ci(
    monkeypatch: pytest.MonkeyPatch, in_ci: bool
) -> None:
    def missing(arch: str) -> None:
        raise tool.MissingToolError("checking Debian's signature needs gpgv")

    monkeypatch.setattr(test_package, "_interpreter", missing)
    monkeypatch.setattr(test_package, "IN_CI", in_ci)
    outcome = pytest.fail.Exception if in_ci else pytest.skip.Exception
    with pytest.raises(outcome, match="needs gpgv"):
        test_package.interpreter_for("arm64")
