"""``tasklease --version`` names the package's version, the one the API's OpenAPI reports
and the upgrade test tells releases apart by."""

from __future__ import annotations

import tomllib
from pathlib import Path

from typer.testing import CliRunner

from app import __version__
from app.cli.main import cli


def test_version_is_the_package_version() -> None:
    result = CliRunner().invoke(cli, ["--version"])
    assert result.exit_code == 0, result.output
    assert result.output.strip() == f"tasklease {__version__}"
    project = tomllib.loads((Path(__file__).parents[2] / "pyproject.toml").read_text())
    assert project["project"]["version"] == __version__


def test_no_command_shows_help_and_fails() -> None:
    result = CliRunner().invoke(cli, ["-v"])
    assert result.exit_code == 2
    assert "Commands" in result.output
