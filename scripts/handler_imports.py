"""Import every Lambda handler from a built package, in a clean Python of the package's
runtime version on the package's instruction set.

Used by ``make package`` (scripts/package_lambda.py) after it writes the zip, and by
tests/infra/test_package.py. The interpreter is a native one where the machine has it
(on PATH, uv's, pyenv's), else, for arm64 on an x86_64 machine, the aarch64 python3.13
that scripts/arm64_python.py builds from Debian's packages and runs under qemu.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import platform
import shutil
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import NamedTuple

HANDLERS = ("handlers.worker", "handlers.api", "handlers.sweeper", "handlers.migrate")
MACHINES = {"arm64": "aarch64", "x86_64": "x86_64"}  # platform.machine() on each
# Dummies: unreachable on purpose (port 9 is "discard"), so an import that tried
# to connect would fail instead of passing quietly.
DUMMY_ENV = {
    "TASKLEASE_DATABASE_URL": "postgresql://tasklease:dummy@127.0.0.1:9/tasklease",
    "TASKLEASE_QUEUE_URL": "http://127.0.0.1:9/queue/us-east-1/000000000000/tasklease-jobs",
    "TASKLEASE_DLQ_URL": "http://127.0.0.1:9/queue/us-east-1/000000000000/tasklease-jobs-dlq",
    "AWS_REGION": "us-east-1",
    "AWS_ACCESS_KEY_ID": "dummy",
    "AWS_SECRET_ACCESS_KEY": "dummy",
}
# `python -I` ignores PYTHONPATH (it implies -E), so the unzipped dir is put on
# sys.path by the code itself; -S leaves out every site-packages, so nothing from
# the repo, .venv or the base interpreter can leak in.
IMPORT_CODE = """
import importlib, json, sys
root = sys.argv[1]
sys.path.insert(0, root)
found = {}
for name in sys.argv[2:]:
    found[name] = importlib.import_module(name).__file__
# What the handlers import only when they need it (boto3 for the RDS secret): a zip
# without it would import cleanly and fail at run time.
for name in ("boto3", "botocore.exceptions"):
    importlib.import_module(name)
import psycopg
found["psycopg_impl"] = psycopg.pq.__impl__
found["sys_path_extra"] = [p for p in sys.path if "site-packages" in p]
print(json.dumps(found))
"""
PROBE = "import platform, sys; print(sys.version_info[:2], platform.machine())"
IMPORT_TIMEOUT = 300


class Interpreter(NamedTuple):
    command: list[str]
    words: str  # "python3.13 aarch64 (qemu)"
    emulated: bool


def arm64_python() -> ModuleType:
    """scripts/arm64_python.py, loaded by path (scripts/ is not a package)."""
    if "arm64_python" not in sys.modules:
        spec = importlib.util.spec_from_file_location(
            "arm64_python", Path(__file__).with_name("arm64_python.py")
        )
        assert spec is not None
        assert spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules["arm64_python"] = module
        spec.loader.exec_module(module)
    return sys.modules["arm64_python"]


def answers(command: list[str], version: str, arch: str) -> bool:
    """Whether ``command`` runs Python ``version`` ("3.13") on ``arch``'s instruction set."""
    want = f"({version.replace('.', ', ')}) {MACHINES[arch]}"
    try:
        out = subprocess.run(  # noqa: S603
            [*command, "-I", "-S", "-c", PROBE],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return False
    return out.stdout.strip() == want


def native_candidates(version: str) -> list[list[str]]:
    """Python ``version`` interpreters this machine has, none of them a virtualenv's (its
    packages must not leak in): on PATH, uv's, pyenv's (whose shim fails when the version
    is installed but not the active one, so its versions are looked at directly)."""
    found = [shutil.which(f"python{version}")]
    uv = os.environ.get("UV") or shutil.which("uv") or str(Path.home() / ".local/bin/uv")
    with contextlib.suppress(OSError, subprocess.TimeoutExpired):
        found.append(
            subprocess.run(  # noqa: S603
                [uv, "python", "find", "--no-project", version],
                capture_output=True,
                text=True,
                timeout=30,
                check=False,
            ).stdout.strip()
        )
    pyenv = Path(os.environ.get("PYENV_ROOT", Path.home() / ".pyenv")) / "versions"
    found.extend(str(p) for p in sorted(pyenv.glob(f"{version}*/bin/python3")))
    return [[p] for p in found if p]


def can_emulate(arch: str, version: str) -> bool:
    """Whether scripts/arm64_python.py can give this machine a Python for ``arch``."""
    tool = arm64_python()
    return arch == "arm64" and version == "3.13" and platform.machine() in tool.HOSTS


def interpreter_for(arch: str, version: str, emulate: bool) -> Interpreter | None:
    """Python ``version`` on ``arch``: a native one first, then (``emulate``) the emulated
    one, built if need be. None when there is neither. Building raises
    arm64_python.Arm64PythonError (its NetworkError when Debian's archive is out of reach,
    MissingToolError without gpgv or the keyring), as does a built one that does not run."""
    for command in native_candidates(version):
        if answers(command, version, arch):
            return Interpreter(command, f"python{version} {MACHINES[arch]} ({command[0]})", False)
    if emulate and can_emulate(arch, version):
        tool = arm64_python()
        command = tool.build()
        if not answers(command, version, arch):
            raise tool.Arm64PythonError(
                f"the emulated python{version} in {tool.DEFAULT_CACHE} does not run "
                f"({' '.join(command)}): run python scripts/arm64_python.py --rebuild"
            )
        return Interpreter(command, f"python{version} {MACHINES[arch]} (qemu)", True)
    return None


def precompile(root: Path, version: str) -> bool:
    """Compile the package's modules to bytecode with a native Python ``version`` of any
    architecture (bytecode is the same on every one), so the emulated interpreter only
    runs them: 3 s + 10 s here instead of 38 s. Only a shortcut: bytecode the emulated
    Python does not accept (another magic number) it compiles again itself."""
    here = platform.machine()
    arch = next((a for a, m in MACHINES.items() if here in (a, m)), None)
    if arch is None:
        return False
    for command in native_candidates(version):
        if answers(command, version, arch):
            proc = subprocess.run(  # noqa: S603
                [*command, "-I", "-m", "compileall", "-q", "-j0", str(root)],
                capture_output=True,
                timeout=IMPORT_TIMEOUT,
                check=False,
            )
            return proc.returncode == 0
    return False


def import_handlers(
    root: Path, python: Interpreter, env: dict[str, str], also: tuple[str, ...] = ()
) -> subprocess.CompletedProcess[str]:
    """Import every handler (and ``also``) from the unzipped package at ``root`` under
    ``python``, isolated (-I -S) and with only ``env`` (and PATH) in its environment.
    The last line of its stdout is JSON: each module's file, psycopg's implementation."""
    if python.emulated:
        precompile(root, python.words.split()[0].removeprefix("python"))
    return subprocess.run(  # noqa: S603
        [*python.command, "-I", "-S", "-c", IMPORT_CODE, str(root), *HANDLERS, *also],
        env={"PATH": "/usr/bin:/bin", **env},
        cwd=root,
        capture_output=True,
        text=True,
        timeout=IMPORT_TIMEOUT,
        check=False,
    )
