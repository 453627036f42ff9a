"""The migration files read and checked before any is applied (docs/howto/migrations.md).

A file is a transactional part, run in one transaction, then optionally an online part: the
statements after a line ``-- tasklease: no-transaction``, each run on its own in autocommit
(``CREATE INDEX CONCURRENTLY``, which a transaction refuses). A run killed in the online part
runs it again from its first statement, so each must be safe to run again: the check here
accepts only the forms that are, and names the file and the statement it refuses.
"""

from __future__ import annotations

import dataclasses
import re
from typing import LiteralString, cast

from app.store import sql

ONLINE_MARKER = "-- tasklease: no-transaction"

# The statements an online part may hold: each is a no-op, or finishes the work, when run
# again. (An index a killed build left INVALID is dropped by the runner before the build.)
_INDEX = re.compile(
    r"^CREATE\s+(?:UNIQUE\s+)?INDEX\s+CONCURRENTLY\s+IF\s+NOT\s+EXISTS\s+(?P<name>\S+)\s+ON\s",
    re.IGNORECASE,
)
# A batched backfill: an UPDATE or DELETE of at most LIMIT rows (in its subquery), run again
# and again, each run its own transaction, until it touches no row. Its WHERE must leave
# out the rows already done, or it never ends.
_BATCH = re.compile(r"^(?:UPDATE\s|DELETE\s+FROM\s).*\bLIMIT\s+\d+\b", re.IGNORECASE | re.DOTALL)
_ONLINE_FORMS = (
    _INDEX,
    _BATCH,
    re.compile(r"^DROP\s+INDEX\s+CONCURRENTLY\s+IF\s+EXISTS\s", re.IGNORECASE),
    re.compile(r"^ALTER\s+TABLE\s+(?:ONLY\s+)?\S+\s+VALIDATE\s+CONSTRAINT\s+\S+$", re.IGNORECASE),
    re.compile(r"^ANALYZE(?:\s|$)", re.IGNORECASE),
)
ONLINE_FORMS_TEXT = (
    "CREATE [UNIQUE] INDEX CONCURRENTLY IF NOT EXISTS, DROP INDEX CONCURRENTLY IF EXISTS, "
    "ALTER TABLE ... VALIDATE CONSTRAINT, ANALYZE, and a batched UPDATE or DELETE: one whose "
    "subquery has a LIMIT, run until it touches no row"
)
# An index built inside the transaction: allowed only on a table the same file creates.
# (The index's name is optional: CREATE INDEX ON t (c) builds one as well.)
_PLAIN_INDEX = re.compile(
    r"^CREATE\s+(?:UNIQUE\s+)?INDEX\s+(?:IF\s+NOT\s+EXISTS\s+)?(?:(?!ON\s)\S+\s+)?"
    r"ON\s+(?:ONLY\s+)?(?P<table>[\w.]+)",
    re.IGNORECASE,
)
# A constraint that builds an index as it is added (UNIQUE, PRIMARY KEY, EXCLUDE) unless
# it takes one built before (USING INDEX).
_CONSTRAINT_INDEX = re.compile(
    r"^ALTER\s+TABLE\s+(?:IF\s+EXISTS\s+)?(?:ONLY\s+)?(?P<table>[\w.]+)\s+.*?"
    r"\bADD\s+(?:CONSTRAINT\s+\S+\s+)?(?:UNIQUE|PRIMARY\s+KEY|EXCLUDE)\b(?!.*\bUSING\s+INDEX\b)",
    re.IGNORECASE | re.DOTALL,
)
_NEW_TABLE = re.compile(
    r"^CREATE\s+TABLE\s+(?:IF\s+NOT\s+EXISTS\s+)?(?P<table>[\w.]+)", re.IGNORECASE
)
# The first migration written to run under load; the released ones before it (0003, 0004,
# 0018 and 0019 lock jobs while they run) are not checked for plain index builds.
FIRST_ONLINE = "0024_reruns"
_PLAIN_NAME = re.compile(r"^[a-z_][a-z0-9_]*(?:\.[a-z_][a-z0-9_]*)?$")
_CONCURRENTLY = re.compile(r"\bCONCURRENTLY\b", re.IGNORECASE)
_DOLLAR_TAG = re.compile(r"\$(?:[A-Za-z_][A-Za-z0-9_]*)?\$")


class MigrationFileError(ValueError):
    """A migration file the runner refuses, before anything is applied."""


@dataclasses.dataclass(frozen=True)
class OnlineStatement:
    text: LiteralString
    # The index a CREATE INDEX CONCURRENTLY builds (its name as written), else None.
    index: str | None
    # A batched backfill: run until it touches no row.
    batched: bool = False


@dataclasses.dataclass(frozen=True)
class Migration:
    version: str
    transactional: LiteralString  # "" when the file has no transactional statement
    online: tuple[OnlineStatement, ...]


def load() -> list[Migration]:
    """Every migration file, in order, checked; MigrationFileError names a bad one."""
    return [parse(version, body) for version, body in sql.migrations()]


def parse(version: str, text: str) -> Migration:
    """Split ``text`` at the online marker and check both parts."""
    lines = text.splitlines(keepends=True)
    marks = [i for i, line in enumerate(lines) if line.strip() == ONLINE_MARKER]
    if len(marks) > 1:
        raise MigrationFileError(
            f"migration {version}.sql: {ONLINE_MARKER!r} appears {len(marks)} times "
            f"(lines {', '.join(str(i + 1) for i in marks)}); a file has one online part, "
            "after its transactional part: put later steps in a new file"
        )
    cut = marks[0] if marks else len(lines)
    transactional, online = "".join(lines[:cut]), "".join(lines[cut + 1 :])
    in_transaction = statements(transactional)
    for statement in in_transaction:
        if _CONCURRENTLY.search(statement):
            raise MigrationFileError(
                f"migration {version}.sql: {_short(statement)!r} runs CONCURRENTLY, which a "
                f"transaction refuses: put it after a line {ONLINE_MARKER!r}"
            )
    if version >= FIRST_ONLINE:
        _no_plain_index_on_a_used_table(version, in_transaction)
    checked = tuple(_online(version, s) for s in statements(online)) if marks else ()
    body = transactional if in_transaction else ""
    # mypy reads LiteralString as str (a redundant cast to it); pyright does not.
    return Migration(version, cast(LiteralString, body), checked)  # type: ignore[redundant-cast]


def _no_plain_index_on_a_used_table(version: str, in_transaction: list[str]) -> None:
    made = {m.group("table").lower() for s in in_transaction if (m := _NEW_TABLE.match(s))}
    for statement in in_transaction:
        index = _PLAIN_INDEX.match(statement) or _CONSTRAINT_INDEX.match(statement)
        if index is not None and index.group("table").lower() not in made:
            raise MigrationFileError(
                f"migration {version}.sql: {_short(statement)!r} builds an index of a table in "
                "use inside the transaction, which blocks its writes until the build ends: "
                f"build it CONCURRENTLY IF NOT EXISTS after a line {ONLINE_MARKER!r}"
            )


def _online(version: str, statement: str) -> OnlineStatement:
    if not any(form.match(statement) for form in _ONLINE_FORMS):
        raise MigrationFileError(
            f"migration {version}.sql: its online part (after {ONLINE_MARKER!r}) runs again "
            f"from its first statement after a crash, so it may hold only statements safe to "
            f"run twice ({ONLINE_FORMS_TEXT}); refused: {_short(statement)!r}"
        )
    index = _INDEX.match(statement)
    name = index.group("name") if index else None
    if name is not None and not _PLAIN_NAME.match(name):
        raise MigrationFileError(
            f"migration {version}.sql: index name {name!r} in {_short(statement)!r}: an online "
            "index is named by a plain lower-case identifier (the runner drops it by that name "
            "when a killed build left it INVALID)"
        )
    text = cast(LiteralString, statement)  # type: ignore[redundant-cast]
    return OnlineStatement(text, name, batched=_BATCH.match(statement) is not None)


def _short(statement: str) -> str:
    flat = " ".join(statement.split())
    return flat if len(flat) <= 120 else flat[:117] + "..."


def statements(text: str) -> list[str]:
    """The statements of ``text``, split at semicolons outside strings, quoted names,
    dollar-quoted bodies and comments; comments dropped, each stripped, empty ones gone."""
    out: list[str] = []
    current: list[str] = []
    i, n = 0, len(text)
    while i < n:
        ch = text[i]
        if text.startswith("--", i):
            end = text.find("\n", i)
            i = n if end < 0 else end
            continue
        if text.startswith("/*", i):
            end = text.find("*/", i + 2)
            i = n if end < 0 else end + 2
            current.append(" ")
            continue
        if ch in ("'", '"'):
            end = _closing_quote(text, i, ch)
            current.append(text[i:end])
            i = end
            continue
        tag = _DOLLAR_TAG.match(text, i) if ch == "$" else None
        if tag is not None:
            close = text.find(tag.group(), tag.end())
            end = n if close < 0 else close + len(tag.group())
            current.append(text[i:end])
            i = end
            continue
        if ch == ";":
            out.append("".join(current).strip())
            current = []
        else:
            current.append(ch)
        i += 1
    out.append("".join(current).strip())
    return [s for s in out if s]


def _closing_quote(text: str, start: int, quote: str) -> int:
    """The index just past the quote closing the one at ``start`` (a doubled quote is
    part of the string)."""
    i = start + 1
    while i < len(text):
        if text[i] == quote:
            if text.startswith(quote * 2, i):
                i += 2
                continue
            return i + 1
        i += 1
    return len(text)
