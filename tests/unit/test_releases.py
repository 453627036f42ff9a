"""The previous release as CHANGELOG.md names it (tests/releases.py): the newest released
section with a ``Commit:`` line, which the upgrade test checks out."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests import releases

pytestmark = pytest.mark.unit

FULL = "9bf5b79b525f8ea1e1fbfa888d1005c88ae11df6"


def changelog(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "CHANGELOG.md"
    path.write_text(text)
    return path


def test_the_newest_released_section_with_a_commit_line_is_the_previous_release(
    tmp_path: Path,
) -> None:
    text = f"""# Changelog

## [Unreleased]

### Added
- Something.
Commit: 1111111111111111111111111111111111111111

## [0.10.0] - 2027-01-02

No commit line here.

## [0.1.0] - 2026-12-06

Commit: `{FULL.upper()}`

## [0.8.0] - 2026-11-01

Commit: 2222222
"""
    found = releases.previous_release(changelog(tmp_path, text))
    assert found == releases.Release(version="0.1.0", commit=FULL)


def test_a_changelog_without_a_released_commit_says_what_line_it_needs(tmp_path: Path) -> None:
    text = "# Changelog\n\n## [Unreleased]\n\nCommit: 1234567\n"
    with pytest.raises(releases.ReleaseError, match=r"'Commit: <full commit id>'"):
        releases.previous_release(changelog(tmp_path, text))


def test_this_repository_names_its_previous_release() -> None:
    found = releases.previous_release()
    assert found.version and len(found.commit) == 40, f"{found}: write the full commit id"


LOCK = """
version = 1

[[package]]
name = "httpx"
version = "{httpx}"
source = {{ registry = "https://pypi.org/simple" }}

[[package]]
name = "tasklease"
version = "{own}"
source = {{ editable = "." }}
"""


def test_a_lock_differing_only_in_the_projects_own_version_pins_the_same() -> None:
    old = releases._pinned(LOCK.format(httpx="0.28.1", own="0.1.0"))
    assert releases._pinned(LOCK.format(httpx="0.28.1", own="0.4.0.dev0")) == old
    assert releases._pinned(LOCK.format(httpx="0.28.2", own="0.1.0")) != old
