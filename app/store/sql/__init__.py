"""Named SQL queries, loaded once from queries.sql; migrations live beside them.

The executor takes ``LiteralString`` so that SQL built from strings at run time
fails type checking: every value goes in as a bound parameter.
"""

from __future__ import annotations

import re
from importlib import resources
from typing import LiteralString, cast

_NAME = re.compile(r"^-- name: (\w+)\s*$", re.MULTILINE)


def _load() -> dict[str, LiteralString]:
    text = resources.files(__package__).joinpath("queries.sql").read_text()
    parts = _NAME.split(text)
    out: dict[str, LiteralString] = {}
    for name, body in zip(parts[1::2], parts[2::2], strict=True):
        if name in out:
            raise RuntimeError(f"query {name!r} is defined twice in queries.sql")
        out[name] = cast(LiteralString, body.strip())
    return out


queries: dict[str, LiteralString] = _load()


def migrations() -> list[tuple[str, LiteralString]]:
    """(version, sql) for each migration file, in order."""
    folder = resources.files(__package__).joinpath("migrations")
    files = sorted((p for p in folder.iterdir() if p.name.endswith(".sql")), key=lambda p: p.name)
    return [(p.name.removesuffix(".sql"), cast(LiteralString, p.read_text())) for p in files]  # type: ignore[redundant-cast]  # mypy reads LiteralString as str; pyright does not
