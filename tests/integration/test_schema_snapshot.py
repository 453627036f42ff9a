"""app/store/sql/schema.sql is the schema the migrations make: a reader sees the whole of it
in one file, and a migration's change shows in that file's diff. `make schema` writes it
(this test with TASKLEASE_WRITE_SCHEMA=1)."""

from __future__ import annotations

import difflib
import os

import pytest

from app.store import schema
from tests.conftest import ROOT

pytestmark = pytest.mark.integration

SNAPSHOT = ROOT / "app" / "store" / "sql" / "schema.sql"


def test_the_schema_snapshot_is_what_the_migrations_make(database_url: str) -> None:
    made = schema.snapshot(database_url)
    if os.environ.get("TASKLEASE_WRITE_SCHEMA") == "1":
        SNAPSHOT.write_text(made)
    kept = SNAPSHOT.read_text() if SNAPSHOT.exists() else ""
    if made != kept:
        diff = difflib.unified_diff(
            kept.splitlines(keepends=True),
            made.splitlines(keepends=True),
            fromfile="app/store/sql/schema.sql (the snapshot)",
            tofile="what the migrations make",
        )
        pytest.fail(
            "the migrations and app/store/sql/schema.sql disagree: run `make schema` and "
            "commit the file (its diff is the change your migration makes to the schema):\n"
            + "".join(diff),
            pytrace=False,
        )
