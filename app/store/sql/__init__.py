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


def _compact(text: str) -> str:
    """``text`` as PostgreSQL needs it: no comment lines, no indentation, no blank lines.

    psycopg parses a statement's ``%(name)s`` placeholders once and caches the result
    only for statements up to 4,096 characters (``_queries.MAX_CACHED_STATEMENT_LENGTH``);
    the two hottest, the submission's admission and the worker's claim, were 10,000
    characters with their comments, so every call parsed them again (issue 37's profile:
    ``_split_query`` was the API's second costliest function). A trailing ``-- ...`` is
    dropped too; no statement has ``--`` or a newline inside a string literal (a unit
    test holds every query to that), so each line stays valid alone.
    """
    lines = []
    for line in text.splitlines():
        code = line.split("--", 1)[0].strip() if "--" in line else line.strip()
        if code:
            lines.append(code)
    return "\n".join(lines)


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
            text = _compact(_used(body, fragments, f"query {name!r}"))
            # mypy reads LiteralString as str (a redundant cast to it); pyright does not.
            out[name] = cast(LiteralString, text)  # type: ignore[redundant-cast]
            home[name] = aggregate
    return out, home


_PLACEHOLDER = re.compile(r"%\((\w+)\)s|%%")


def _positional(text: str) -> tuple[LiteralString, tuple[str, ...]]:
    """``text`` with each ``%(name)s`` made ``$n`` (one n a name) and ``%%`` made ``%``,
    and the names in n's order: what psycopg's raw cursor runs with no parsing at all."""
    names: list[str] = []

    def number(m: re.Match[str]) -> str:
        if m.group(0) == "%%":
            return "%"
        if m.group(1) not in names:
            names.append(m.group(1))
        return f"${names.index(m.group(1)) + 1}"

    out = _PLACEHOLDER.sub(number, text)
    if "%" in _PLACEHOLDER.sub("", text).replace("%%", ""):
        raise RuntimeError(f"a placeholder other than %(name)s in: {text[:80]}")
    return cast(LiteralString, out), tuple(names)  # type: ignore[redundant-cast]


queries: dict[str, LiteralString]
# The aggregate (the queries/ file, and the app/store module) each query belongs to.
aggregate_of: dict[str, str]
queries, aggregate_of = _load()
# Each named query's text -> its positional form (``_positional``): the executor runs it
# with no placeholder parsing (psycopg parses and caches only statements up to 4,096
# characters; the admission and the claim are longer, issue 37).
positional: dict[str, tuple[LiteralString, tuple[str, ...]]] = {
    text: _positional(text) for text in queries.values()
}


def migrations() -> list[tuple[str, LiteralString]]:
    """(version, sql) for each migration file, in order."""
    # mypy reads LiteralString as str (a redundant cast to it); pyright does not.
    return [(v, cast(LiteralString, body)) for v, body in _sql_files("migrations")]  # type: ignore[redundant-cast]
