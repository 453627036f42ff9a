"""The previous release, as the upgrade test (tests/e2e/test_upgrade.py) runs it.

CHANGELOG.md names each release with the commit it was cut from, on a line of its own
under the release's heading (tags need not travel with a clone; the history does)::

    ## [0.1.0] - 2026-12-06

    Commit: 9bf5b79b525f8ea1e1fbfa888d1005c88ae11df6

``previous_release`` reads the newest released section that has one. ``checkout`` writes
that commit's code (``app``, ``tasklease``, ``handlers``: what its processes import) into
``.tasklease/releases/<commit>/`` with ``git archive``, compiled, once per machine; a
process started there with that folder first on its path (``release_env``) runs the
release's code with this checkout's installed dependencies, which is right as long as
uv.lock did not change between the two (``lock_changed`` says whether it did).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tomllib
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
RELEASES = ROOT / ".tasklease" / "releases"
# The release's own code; its tests, docs and infrastructure are not run.
CODE = ("app", "tasklease", "handlers")

_HEADING = re.compile(r"^## \[(?P<version>[^\]]+)\]")
_COMMIT = re.compile(r"^Commit:\s*`?(?P<commit>[0-9a-fA-F]{7,40})`?\s*$")


class ReleaseError(Exception):
    """The previous release cannot be found or checked out; the message says why."""


@dataclass(frozen=True)
class Release:
    version: str
    commit: str


def previous_release(changelog: Path = ROOT / "CHANGELOG.md") -> Release:
    """The newest release in ``changelog`` whose section names its commit (``Commit: <id>``);
    [Unreleased] is never one."""
    version: str | None = None
    for line in changelog.read_text(encoding="utf-8").splitlines():
        heading = _HEADING.match(line)
        if heading:
            found = heading["version"].strip()
            version = None if found.lower() == "unreleased" else found
            continue
        commit = _COMMIT.match(line.strip())
        if commit and version is not None:
            return Release(version=version, commit=commit["commit"].lower())
    raise ReleaseError(
        f"{changelog.name} names no released version with its commit: a section "
        "'## [X.Y.Z] - DATE' with a line 'Commit: <full commit id>' is needed"
    )


def _git(*args: str) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        ["git", *args],
        cwd=ROOT,
        capture_output=True,
        check=False,
    )


def resolve(release: Release) -> str:
    """The release's full commit id, or ReleaseError saying how to fetch it."""
    found = _git("rev-parse", "--verify", "--quiet", f"{release.commit}^{{commit}}")
    if found.returncode != 0:
        raise ReleaseError(
            f"release {release.version}'s commit {release.commit} (CHANGELOG.md) is not in "
            "this clone's history (a shallow clone?): fetch it with `git fetch --unshallow` "
            f"or `git fetch origin {release.commit}`"
        )
    return found.stdout.decode().strip()


def lock_changed(commit: str) -> bool:
    """Whether the dependencies uv.lock pins differ between ``commit`` and the working
    tree. The project's own version (its editable package's ``version``) is left out:
    it changes with every release and puts no other code under the old processes."""
    then = _git("show", f"{commit}:uv.lock")
    if then.returncode != 0:
        return True
    now = (Path(__file__).parents[1] / "uv.lock").read_text()
    return _pinned(then.stdout.decode()) != _pinned(now)


def _pinned(lock: str) -> list[dict[str, Any]]:
    """uv.lock's packages, the project's own without its version."""
    packages = tomllib.loads(lock).get("package", [])
    return [
        {k: v for k, v in p.items() if k != "version"}
        if p.get("source", {}).get("editable") == "."
        else p
        for p in packages
    ]


def checkout(release: Release) -> Path:
    """The release's code, extracted once into .tasklease/releases/<commit>/ and compiled
    (processes started there need not compile it again, with or without
    PYTHONDONTWRITEBYTECODE). Safe for two test processes at once: each extracts into a
    folder of its own and the first rename wins."""
    commit = resolve(release)
    tree = RELEASES / commit
    if (tree / "app").is_dir():
        return tree
    RELEASES.mkdir(parents=True, exist_ok=True)
    scratch = RELEASES / f".{commit}.{uuid.uuid4().hex[:8]}"
    scratch.mkdir()
    try:
        archive = _git("archive", "--format=tar", commit, *CODE)
        if archive.returncode != 0:
            raise ReleaseError(f"git archive {commit} failed: {archive.stderr.decode()}")
        subprocess.run(
            ["tar", "-x", "-C", str(scratch)],
            input=archive.stdout,
            check=True,
        )
        subprocess.run(
            [sys.executable, "-m", "compileall", "-q", "-j", "0", *CODE],
            cwd=scratch,
            stdout=subprocess.DEVNULL,
            check=True,
        )
        try:
            scratch.rename(tree)
        except OSError:
            if not (tree / "app").is_dir():
                raise
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return tree


def release_env(tree: Path) -> dict[str, str]:
    """What makes ``python -m app.cli`` (run in ``tree``) import the release's code ahead
    of this checkout's, which the virtualenv's editable install puts on the path too."""
    path = os.environ.get("PYTHONPATH")
    return {"PYTHONPATH": f"{tree}{os.pathsep}{path}" if path else str(tree)}


def heals_stale_plans(tree: Path) -> bool:
    """Whether the release at ``tree`` survives a migration that changes what its prepared
    statements return (app/store/pool.py's StalePlan, since the release after 0.1.0). One
    that does not must be restarted right after such a migration (docs/howto/upgrade.md)."""
    return "class StalePlan" in (tree / "app" / "store" / "pool.py").read_text(encoding="utf-8")
