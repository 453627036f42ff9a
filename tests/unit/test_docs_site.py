"""The documentation site's machinery (mkdocs.yml, scripts/reference/): every page of the
nav exists and every page is in the nav; the generated reference lists every setting,
command and endpoint the code has; the SDK pages name every public name. The strict
build itself (`make docs`, in .ci/run) checks the links and anchors."""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Any

import pytest
import typer
import yaml

import tasklease
import tasklease.client
import tasklease.testing
from app.cli.main import cli

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
sys.path.insert(0, str(ROOT / "scripts" / "reference"))
import cli_ref  # noqa: E402
import hooks  # noqa: E402
import http_ref  # noqa: E402
import settings_ref  # noqa: E402


def nav_pages(entries: list[Any]) -> list[str]:
    pages: list[str] = []
    for entry in entries:
        value = next(iter(entry.values())) if isinstance(entry, dict) else entry
        pages += nav_pages(value) if isinstance(value, list) else [value]
    return pages


class _Loader(yaml.SafeLoader):
    """mkdocs.yml as data: its ``!!python/name:`` tags (the mermaid fence) name functions
    that mkdocs imports; here they are only strings."""


_Loader.add_multi_constructor("tag:yaml.org,2002:python/", lambda loader, suffix, node: suffix)


@pytest.fixture(scope="module")
def nav() -> list[str]:
    config = yaml.load((ROOT / "mkdocs.yml").read_text(), Loader=_Loader)
    return nav_pages(config["nav"])


def test_every_page_of_the_nav_exists_or_is_generated(nav: list[str]) -> None:
    missing = [p for p in nav if not (DOCS / p).is_file() and p not in hooks.GENERATED]
    assert not missing, f"in mkdocs.yml's nav but not in docs/: {missing}"
    assert len(nav) == len(set(nav)), "a page is twice in the nav"


def test_every_page_is_in_the_nav(nav: list[str]) -> None:
    pages = {p.relative_to(DOCS).as_posix() for p in DOCS.rglob("*.md")}
    assert pages - set(nav) == set(), "pages in docs/ that the nav leaves out"
    assert set(hooks.GENERATED) <= set(nav), "a generated page the nav leaves out"


def test_generated_pages_are_not_committed() -> None:
    assert not [p for p in hooks.GENERATED if (DOCS / p).exists()]


def test_the_settings_reference_lists_every_setting_with_its_description() -> None:
    page = settings_ref.render()
    from app.demos.triage.settings import TriageSettings
    from app.settings.config import Settings

    for model in (Settings, TriageSettings):
        for name, field in model.model_fields.items():
            var = "TASKLEASE_" + name.upper()
            assert f"`{var}`" in page, f"{var} is missing from the settings reference"
            assert field.description, f"{var} has no Field(description=...)"
    assert settings_ref.names().count("TASKLEASE_MAX_ATTEMPTS") == 1


def test_a_settings_row_says_type_default_and_bounds() -> None:
    rows = {
        line.split("`")[1]: line
        for line in settings_ref.render().splitlines()
        if line.startswith("| <span id=")
    }
    assert "| `int`<br>≥ 1, ≤ 65535 | `5432` |" in rows["TASKLEASE_DATABASE_PORT"]
    assert '| `"sqs" | "redis"` | `sqs` |' in rows["TASKLEASE_TRANSPORT"]
    assert "| `86400` (1 day) |" in rows["TASKLEASE_REDRIVE_WINDOW_SECONDS"]
    assert "| unset |" in rows["TASKLEASE_DATABASE_URL"]
    # A setting a description names links to its row.
    assert (
        "[`TASKLEASE_DATABASE_SECRET_ARN`](#tasklease_database_secret_arn)"
        in (rows["TASKLEASE_DATABASE_PORT"])
    )


def test_the_cli_reference_has_every_command() -> None:
    page = cli_ref.render()
    group = typer.main.get_command(cli)
    headings = set(re.findall(r"^#+ `(tasklease[^`]*)`$", page, re.M))

    def paths(command: Any, prefix: str) -> list[str]:
        found = [prefix]
        for name, sub in getattr(command, "commands", {}).items():
            found += paths(sub, f"{prefix} {name}")
        return found

    expected = set(paths(group, "tasklease")) - {"tasklease"}  # the page title
    assert "tasklease jobs list" in expected
    assert expected - headings == set()
    # A group's list of commands links to their sections.
    assert "* [`submit`](#tasklease-submit):" in page


def test_the_http_reference_has_every_operation_and_schema() -> None:
    document = http_ref.openapi()
    page = http_ref.render(document)
    for path, item in document["paths"].items():
        for method in item:
            assert f"### `{method.upper()} {path}`" in page
    for name in document["components"]["schemas"]:
        assert f"### {name} {{ #{http_ref.schema_anchor(name)} }}" in page
    assert "[JobCreate](#schema-jobcreate)" in page


@pytest.mark.parametrize(
    ("page", "module"),
    [("reference/sdk.md", tasklease), ("reference/client.md", tasklease.client)],
)
def test_the_sdk_pages_name_every_public_name(page: str, module: Any) -> None:
    text = (DOCS / page).read_text()
    named = set(re.findall(rf"^::: {re.escape(module.__name__)}\.(\w+)$", text, re.M))
    assert set(module.__all__) - named == set(), f"{page} leaves out public names"
    assert named - set(module.__all__) == set(), f"{page} names what is not public"


def test_the_testing_page_renders_the_module_from_its_all() -> None:
    assert "::: tasklease.testing" in (DOCS / "reference/testing.md").read_text()
    config = (ROOT / "mkdocs.yml").read_text()
    assert "filters: public" in config  # members from __all__
    assert tasklease.testing.__all__


def test_ci_builds_the_docs_after_the_checks() -> None:
    lines = (ROOT / ".ci" / "run").read_text().splitlines()
    # Each step is run as `step make <target>` (the step's time is printed).
    steps = [
        s.strip().removeprefix("step ")
        for s in lines
        if s.strip().startswith(("make ", "step make "))
    ]
    assert steps.index("make docs") == steps.index("make check") + 1
