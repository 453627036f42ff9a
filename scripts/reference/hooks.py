"""mkdocs hooks (mkdocs.yml `hooks:`): the generated reference pages, made from the code
each time the site is built and handed to mkdocs as in-memory files, so they cannot
drift from the code and are never written to docs/ or committed.

A hook rather than the mkdocs-gen-files plugin: one dependency fewer, and the generators
are plain functions the unit tests call without mkdocs (tests/unit/test_docs_site.py)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import cli_ref
import http_ref
import settings_ref

if TYPE_CHECKING:
    from mkdocs.config.defaults import MkDocsConfig
    from mkdocs.structure.files import Files


def _api_pages() -> dict[str, str]:
    document = http_ref.openapi()
    return {
        "reference/http-api.md": http_ref.render(document),
        "reference/openapi.json": http_ref.openapi_json(document),
    }


# Each generator makes one or more pages (docs-relative path -> content).
GENERATORS: tuple[Callable[[], dict[str, str]], ...] = (
    lambda: {"reference/settings.md": settings_ref.render()},
    lambda: {"reference/cli.md": cli_ref.render()},
    _api_pages,
)
# The pages they make, for the nav test.
GENERATED = ("reference/settings.md", "reference/cli.md", "reference/http-api.md")


def on_files(files: Files, config: MkDocsConfig) -> Files:
    from mkdocs.structure.files import File

    for generate in GENERATORS:
        for path, content in generate().items():
            if files.get_file_from_path(path) is not None:
                raise ValueError(
                    f"docs/{path} exists, but that page is generated (scripts/reference/hooks.py): "
                    "remove the file"
                )
            files.append(File.generated(config, path, content=content))
    return files
