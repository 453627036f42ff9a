"""Named SQL queries, one file per aggregate in queries/ (queries/jobs.sql for
app/store/jobs.py, ...), loaded once; migrations live beside them.

A file may also hold fragments, ``-- fragment: NAME`` up to the next section: text that
several of its queries share (a filter's conditions), put in each where a line reads
``-- use: NAME``, so the statement PostgreSQL sees is whole and the text is written once.

The executor takes ``LiteralString`` so that SQL built from strings at run time
fails type checking: every value goes in as a bound parameter.
"""

from __future__ import annotations

import re
from importlib import resources
from typing import LiteralString, cast

_NAME = re.compile(r"^-- (name|fragment): (\w+)\s*$", re.MULTILINE)
_USE = re.compile(r"^([ \t]*)-- use: (\w+)[ \t]*$", re.MULTILINE)


def _used(body: str, fragments: dict[str, str], where: str) -> str:
    """``body`` with each ``-- use: NAME`` line replaced by the fragment, indented as it."""

    def fragment(m: re.Match[str]) -> str:
        if m.group(2) not in fragments:
            raise RuntimeError(
                f"{where} uses fragment {m.group(2)!r}, which its file does not define"
            )
        return "\n".join(m.group(1) + line for line in fragments[m.group(2)].splitlines())

    return _USE.sub(fragment, body)


def _sql_files(folder: str) -> list[tuple[str, str]]:
    """(file name without .sql, text) of each .sql file in ``folder``, by name."""
    here = resources.files(__package__).joinpath(folder)
    files = sorted((p for p in here.iterdir() if p.name.endswith(".sql")), key=lambda p: p.name)
    return [(p.name.removesuffix(".sql"), p.read_text()) for p in files]


def _load() -> tuple[dict[str, LiteralString], dict[str, str]]:
    out: dict[str, LiteralString] = {}
    home: dict[str, str] = {}
    for aggregate, text in _sql_files("queries"):
        parts = _NAME.split(text)
        sections = list(zip(parts[1::3], parts[2::3], parts[3::3], strict=True))
        fragments = {name: body.strip() for what, name, body in sections if what == "fragment"}
        for what, name, body in sections:
            if what == "fragment":
                continue
            if name in out:
                raise RuntimeError(
                    f"query {name!r} is defined twice: in {home[name]}.sql and {aggregate}.sql"
                )
            text = _used(body, fragments, f"query {name!r}").strip()
            # mypy reads LiteralString as str (a redundant cast to it); pyright does not.
            out[name] = cast(LiteralString, text)  # type: ignore[redundant-cast]
            home[name] = aggregate
    return out, home


queries: dict[str, LiteralString]
# The aggregate (the queries/ file, and the app/store module) each query belongs to.
aggregate_of: dict[str, str]
queries, aggregate_of = _load()


def migrations() -> list[tuple[str, LiteralString]]:
    """(version, sql) for each migration file, in order."""
    # mypy reads LiteralString as str (a redundant cast to it); pyright does not.
    return [(v, cast(LiteralString, body)) for v, body in _sql_files("migrations")]  # type: ignore[redundant-cast]
