"""The public surface: one package, ``tasklease``, is what a user imports. It re-exports
the SDK (and grows no logic of its own), its client loads none of the server's
dependencies, and a kind written outside this repository needs nothing else."""

from __future__ import annotations

import ast
import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import tasklease
import tasklease.client
import tasklease.testing

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]
PUBLIC = ROOT / "tasklease"
SERVER_ONLY = (
    "fastapi",
    "starlette",
    "uvicorn",
    "mangum",
    "psycopg",
    "psycopg_pool",
    "boto3",
    "botocore",
    "aiobotocore",
    "redis",
    "pydantic_settings",
    "typer",
    "app.api",
    "app.store",
    "app.transport",
    "app.worker",
)


def test_every_public_name_resolves_and_nothing_else_is_offered() -> None:
    for name in tasklease.__all__:
        assert getattr(tasklease, name) is not None, name
    assert sorted(dir(tasklease)) == sorted(tasklease.__all__)
    with pytest.raises(AttributeError, match="no attribute 'LeaseLost'"):
        _ = tasklease.LeaseLost  # type: ignore[attr-defined]


def test_the_internal_control_flow_exceptions_are_not_public() -> None:
    for internal in ("LeaseLost", "HandBack", "Suspend", "Cancelled", "BudgetWait"):
        assert internal not in tasklease.__all__
    for module in (tasklease.testing, tasklease.client):
        for name in module.__all__:
            assert getattr(module, name) is not None, f"{module.__name__}.{name}"


def test_the_public_names_are_the_implementation_s_own_objects() -> None:
    from app import errors
    from app.kinds import kind
    from app.kinds.testing import run_kind

    assert tasklease.kind is kind
    assert tasklease.Retry is errors.Retry
    assert tasklease.testing.run_kind is run_kind
    assert issubclass(tasklease.CallbackFailed, tasklease.PermanentError)


def test_the_package_is_typed_and_shipped() -> None:
    assert (PUBLIC / "py.typed").exists()
    pyproject = (ROOT / "pyproject.toml").read_text()
    assert 'packages = ["tasklease", "app", "handlers"]' in pyproject


def _statements(path: Path) -> list[ast.stmt]:
    return ast.parse(path.read_text()).body


def test_the_public_package_only_re_exports() -> None:
    """tasklease grows no logic: imports, __all__, a docstring and, in __init__, the lazy
    loader (PEP 562) and its table. Logic belongs in app/."""
    for path in PUBLIC.glob("*.py"):
        for node in _statements(path):
            if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant):
                continue  # the docstring
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                continue
            if isinstance(node, ast.If) and ast.unparse(node.test) == "TYPE_CHECKING":
                assert all(isinstance(n, ast.ImportFrom) for n in node.body), path
                continue
            if isinstance(node, ast.Assign | ast.AnnAssign):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                names = {ast.unparse(t) for t in targets}
                assert names <= {"__all__", "_EXPORTS"}, f"{path.name}: {names}"
                continue
            if isinstance(node, ast.FunctionDef) and path.name == "__init__.py":
                assert node.name in {"__getattr__", "__dir__"}, node.name
                continue
            raise AssertionError(f"{path.name}:{node.lineno}: {ast.unparse(node)[:80]}")


def _modules_after(code: str) -> set[str]:
    out = subprocess.run(
        [sys.executable, "-c", f"{code}\nimport json, sys\nprint(json.dumps(sorted(sys.modules)))"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return set(json.loads(out.splitlines()[-1]))


@pytest.mark.parametrize("code", ["import tasklease.client", "from tasklease.client import Client"])
def test_the_client_imports_none_of_the_server_s_dependencies(code: str) -> None:
    loaded = _modules_after(code)
    assert "tasklease.client" in loaded
    assert "httpx" in loaded  # it did load: the check below is not vacuous
    heavy = sorted(m for m in loaded if any(m == s or m.startswith(s + ".") for s in SERVER_ONLY))
    assert heavy == []


def test_importing_tasklease_loads_nothing_until_a_name_is_used() -> None:
    loaded = _modules_after("import tasklease")
    assert "app.kinds" not in loaded
    assert "app.settings.config" not in loaded


KIND = """
from pydantic import BaseModel

from tasklease import JobContext, PermanentError, kind


class Order(BaseModel):
    order_id: str
    amount_cents: int


SENT: list[str] = []


async def charge(order: Order) -> str:
    SENT.append(order.order_id)
    return f"ch_{order.order_id}"


@kind("shop.charge", timeout_seconds=30, max_attempts=3)
async def charge_order(ctx: JobContext[None], order: Order) -> dict[str, str]:
    if order.amount_cents <= 0:
        raise PermanentError("nothing to charge")
    charge_id = await ctx.effect("charge", lambda: charge(order))
    receipt = await ctx.effect("receipt", lambda: charge(order))
    return {"charge": charge_id, "receipt": receipt}
"""

RUN = """
import asyncio, sys

import shop
from tasklease.testing import run_kind

run = asyncio.run(
    run_kind(shop.charge_order, {"order_id": "O-1", "amount_cents": 500}, crash_after_effect=1)
)
assert run.crashed_after == "charge", run.crashed_after
assert run.replayed == ["charge"], run.replayed
assert shop.SENT == ["O-1", "O-1"], shop.SENT  # once per effect, not once more after the crash
assert run.stored == {"charge": "ch_O-1", "receipt": "ch_O-1"}, run.stored
print("ok", sorted(m for m in sys.modules if m.split(".")[0] == "app")[:1])
"""


def test_a_kind_written_outside_the_repository_needs_only_tasklease(tmp_path: Path) -> None:
    """A fresh folder, not this repository: the kind imports only ``tasklease`` (checked
    from its source) and passes ``tasklease.testing.run_kind``, crash included."""
    (tmp_path / "shop.py").write_text(textwrap.dedent(KIND))
    (tmp_path / "run_it.py").write_text(textwrap.dedent(RUN))
    imported = {
        (n.module or "").split(".")[0]
        for n in ast.walk(ast.parse(KIND))
        if isinstance(n, ast.ImportFrom)
    }
    assert imported == {"pydantic", "tasklease"}
    env = {k: v for k, v in os.environ.items() if not k.startswith("TASKLEASE_")}
    env["PYTHONPATH"] = str(tmp_path)
    done = subprocess.run(
        [sys.executable, "run_it.py"], cwd=tmp_path, env=env, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("ok")


def test_the_examples_import_tasklease_never_app() -> None:
    """examples/ is written as a user writes: from the public package only."""
    files = list((ROOT / "examples").rglob("*.py"))
    assert files
    for path in files:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom):
                names = [node.module or ""]
            elif isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            else:
                continue
            for name in names:
                top = name.split(".")[0]
                assert top not in {"app", "handlers"}, f"{path}:{node.lineno} imports {name}"


# An import of the internal packages in a page a user copies from (a line of code).
INTERNAL_IMPORT = re.compile(r"^\s*(from|import)\s+(app|handlers)(\.|\s)", re.MULTILINE)


def test_the_pages_users_copy_from_import_tasklease_never_app() -> None:
    """The README, the docs and examples/ show imports a user may copy: public ones only
    (examples/README.md showed ``from app.kinds import ...`` after the public package
    came)."""
    pages = [ROOT / "README.md", *(ROOT / "examples").rglob("*.md"), *(ROOT / "docs").rglob("*.md")]
    pages += list((ROOT / "docs").rglob("*.py"))
    assert len(pages) > 10
    found = [
        f"{path.relative_to(ROOT)}: {m.group(0).strip()}"
        for path in pages
        for m in INTERNAL_IMPORT.finditer(path.read_text())
    ]
    assert not found, found


def test_a_kind_outside_the_repository_type_checks_strictly(tmp_path: Path) -> None:
    """The types reach a user's type checker: ``tasklease`` re-exports ``app``'s objects,
    so both packages ship ``py.typed`` (without app's, mypy --strict called ``@kind``
    an untyped decorator and every effect's result ``Any``)."""
    assert (ROOT / "app" / "py.typed").exists()
    (tmp_path / "shop.py").write_text(textwrap.dedent(KIND))
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "mypy",
            "--strict",
            "--cache-dir",
            str(tmp_path / ".mypy"),
            "shop.py",
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stdout + done.stderr
