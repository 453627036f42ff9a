"""Named queries and migrations: every name loads once, each query lives in its aggregate's
file and is run by that aggregate's store module; migrations sort by their number."""

from __future__ import annotations

import re
from importlib import resources
from pathlib import Path

import pytest

from app.store import sql

pytestmark = pytest.mark.unit

APP = Path(sql.__file__).resolve().parents[2]
STORE = APP / "store"
QUERY_FILES = sorted(
    (p for p in resources.files("app.store.sql").joinpath("queries").iterdir()),
    key=lambda p: p.name,
)
QUERIES_TEXT = "\n".join(p.read_text() for p in QUERY_FILES)
NAMES = re.findall(r"^-- name: (\w+)\s*$", QUERIES_TEXT, flags=re.MULTILINE)
ASKED = re.compile(r"""\bq\(\s*["'](\w+)["']\s*\)""")


def test_every_query_file_belongs_to_a_store_module() -> None:
    assert all(p.name.endswith(".sql") for p in QUERY_FILES), [p.name for p in QUERY_FILES]
    modules = {p.stem for p in STORE.glob("*.py")}
    assert sorted({p.name.removesuffix(".sql") for p in QUERY_FILES} - modules) == []


def test_the_queries_file_declares_queries() -> None:
    assert len(NAMES) >= 10


def test_query_names_are_unique_in_the_file() -> None:
    duplicates = sorted({n for n in NAMES if NAMES.count(n) > 1})
    assert duplicates == []


def test_every_named_query_loads_with_a_body() -> None:
    assert list(sql.queries) == NAMES
    empty = [name for name, body in sql.queries.items() if not body.strip()]
    assert empty == []


def test_no_query_body_swallowed_a_misspelt_name_line() -> None:
    """A "--name:" typo would glue two queries into one body; each body is one statement."""
    for name, body in sql.queries.items():
        assert "-- name" not in body, name
        assert "--name" not in body, name
        code = re.sub(r"--[^\n]*", "", body).strip()
        assert code.rstrip(";").count(";") == 0, name


def test_queries_bind_parameters_instead_of_formatting_them() -> None:
    for name, body in sql.queries.items():
        assert "{" not in body, name
        assert "%s" not in body, name


def test_every_query_the_code_asks_for_exists() -> None:
    used: set[str] = set()
    for path in APP.rglob("*.py"):
        used |= set(ASKED.findall(path.read_text()))
    assert used, "the scan found no q(...) calls"
    assert sorted(used - set(sql.queries)) == []


def test_every_named_query_is_asked_for_by_the_store() -> None:
    """The store is where statements run: a query none of its modules names is dead."""
    used: set[str] = set()
    for path in STORE.glob("*.py"):
        used |= set(ASKED.findall(path.read_text()))
    assert sorted(set(sql.queries) - used) == []


def test_a_store_module_runs_only_its_own_aggregates_queries() -> None:
    """queries/jobs.sql is what app/store/jobs.py runs, and so on: a query is found
    beside the functions that run it."""
    strays = [
        (path.stem, name)
        for path in STORE.glob("*.py")
        for name in ASKED.findall(path.read_text())
        if sql.aggregate_of.get(name) != path.stem
    ]
    assert strays == []


def test_migrations_are_named_nnnn_and_sorted() -> None:
    versions = [version for version, _ in sql.migrations()]
    assert versions, "no migrations"
    assert versions == sorted(versions)
    for version in versions:
        assert re.fullmatch(r"\d{4}_[a-z0-9_]+", version), version


def test_migration_numbers_are_unique_and_contiguous_from_one() -> None:
    numbers = [int(version[:4]) for version, _ in sql.migrations()]
    assert numbers == list(range(1, len(numbers) + 1))


def test_every_file_in_the_migrations_folder_is_a_migration() -> None:
    folder = resources.files("app.store.sql").joinpath("migrations")
    names = sorted(p.name for p in folder.iterdir() if not p.name.startswith(("__", ".")))
    assert all(n.endswith(".sql") for n in names), names
    assert [n.removesuffix(".sql") for n in names] == [v for v, _ in sql.migrations()]


def test_every_migration_has_sql_in_it() -> None:
    for version, body in sql.migrations():
        assert re.search(r"\b(CREATE|ALTER|DROP|INSERT|UPDATE)\b", body), version


def test_a_fragment_is_put_whole_where_a_query_uses_it_and_an_unknown_one_is_named() -> None:
    assert "-- use:" not in "\n".join(sql.queries.values())
    assert "-- fragment:" not in "\n".join(sql.queries.values())
    for name in ("search_jobs", "bulk_batch", "search_count"):
        assert "j.last_error ILIKE %(error)s::text" in sql.queries[name], name
    fragments = {"cond": "AND a = 1\nAND b = 2"}
    body = "SELECT 1 FROM t\nWHERE true\n    -- use: cond\nLIMIT 1"
    assert sql._used(body, fragments, "q") == (
        "SELECT 1 FROM t\nWHERE true\n    AND a = 1\n    AND b = 2\nLIMIT 1"
    )
    with pytest.raises(RuntimeError, match="query 'q' uses fragment 'nope'"):
        sql._used("SELECT 1\n-- use: nope\n", fragments, "query 'q'")
