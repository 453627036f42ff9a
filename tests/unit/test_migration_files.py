"""The runner's reading of migration files (app/store/migration_files.py): where the online
part starts, and the statements it refuses before anything is applied, each error naming
the file and the statement."""

from __future__ import annotations

import pytest

from app.store import migration_files
from app.store.migration_files import MigrationFileError, parse, statements

pytestmark = pytest.mark.unit

MARK = migration_files.ONLINE_MARKER


def test_every_migration_file_reads_and_builds_its_jobs_indexes_online() -> None:
    online = {m.version: [s.index for s in m.online] for m in migration_files.load() if m.online}
    assert online == {
        "0024_reruns": ["jobs_rerun_of", "jobs_forked_from"],
        "0025_search_and_bulk": ["jobs_payload_path"],
        "0030_flow_keys": ["jobs_flow_key_open", "jobs_flow_key", "jobs_flow_key_claimed"],
    }


def test_a_file_splits_at_the_marker_into_a_transaction_and_statements_run_one_by_one() -> None:
    m = parse(
        "0030_x",
        "ALTER TABLE jobs ADD COLUMN a text; -- a comment; not a statement\n"
        f"  {MARK}  \n"
        "CREATE UNIQUE INDEX CONCURRENTLY IF NOT EXISTS jobs_a ON jobs (a) WHERE a <> ';';\n"
        "/* the old one */ DROP INDEX CONCURRENTLY IF EXISTS jobs_b;\n"
        "ALTER TABLE jobs VALIDATE CONSTRAINT jobs_a_length;\nANALYZE jobs;\n"
        "UPDATE jobs SET a = 'x' WHERE id IN\n  (SELECT id FROM jobs WHERE a IS NULL LIMIT 500);\n",
    )
    assert statements(m.transactional) == ["ALTER TABLE jobs ADD COLUMN a text"]
    assert [(s.text, s.index) for s in m.online] == [
        (
            "CREATE UNIQUE INDEX CONCURRENTLY IF NOT EXISTS jobs_a ON jobs (a) WHERE a <> ';'",
            "jobs_a",
        ),
        ("DROP INDEX CONCURRENTLY IF EXISTS jobs_b", None),
        ("ALTER TABLE jobs VALIDATE CONSTRAINT jobs_a_length", None),
        ("ANALYZE jobs", None),
        (
            "UPDATE jobs SET a = 'x' WHERE id IN\n  (SELECT id FROM jobs WHERE a IS NULL LIMIT 500)",
            None,
        ),
    ]
    assert [s.batched for s in m.online] == [False, False, False, False, True]
    only_online = parse("0030_x", f"-- why\n{MARK}\nANALYZE jobs;\n")
    assert (only_online.transactional, len(only_online.online)) == ("", 1)


def test_semicolons_inside_strings_quoted_names_and_function_bodies_do_not_split() -> None:
    text = (
        "CREATE FUNCTION f() RETURNS int LANGUAGE plpgsql AS $body$ BEGIN RETURN 1; END $body$;\n"
        "SELECT 'it''s; fine', \"odd;name\" FROM t; SELECT $$a;b$$"
    )
    assert statements(text) == [
        "CREATE FUNCTION f() RETURNS int LANGUAGE plpgsql AS $body$ BEGIN RETURN 1; END $body$",
        "SELECT 'it''s; fine', \"odd;name\" FROM t",
        "SELECT $$a;b$$",
    ]


@pytest.mark.parametrize(
    ("text", "named"),
    [
        # Not safe to run twice after a crash: refused in the online part.
        (
            f"{MARK}\nCREATE INDEX CONCURRENTLY jobs_a ON jobs (a);",
            "CREATE INDEX CONCURRENTLY jobs_a",
        ),
        (f"{MARK}\nUPDATE jobs SET a = 'x' WHERE a IS NULL;", "UPDATE jobs SET a = 'x'"),
        (f"{MARK}\nCREATE INDEX IF NOT EXISTS jobs_a ON jobs (a);", "CREATE INDEX IF NOT EXISTS"),
        (f'{MARK}\nCREATE INDEX CONCURRENTLY IF NOT EXISTS "Jobs A" ON jobs (a);', '"Jobs'),
        # CONCURRENTLY inside the transaction, which refuses it.
        ("CREATE INDEX CONCURRENTLY IF NOT EXISTS jobs_a ON jobs (a);", "runs CONCURRENTLY"),
        # A plain index build on a table in use blocks its writes.
        ("CREATE INDEX jobs_a ON jobs (a);", "CREATE INDEX jobs_a ON jobs (a)"),
        ("CREATE INDEX ON jobs (a);", "CREATE INDEX ON jobs (a)"),  # unnamed
        ("ALTER TABLE jobs ADD CONSTRAINT u UNIQUE (a);", "ADD CONSTRAINT u UNIQUE"),
        ("ALTER TABLE ONLY jobs ADD PRIMARY KEY (a);", "ADD PRIMARY KEY"),
        (f"ANALYZE jobs;\n{MARK}\nANALYZE jobs;\n{MARK}\nANALYZE jobs;", "appears 2 times"),
    ],
)
def test_a_file_the_runner_refuses_is_named_with_the_statement(text: str, named: str) -> None:
    with pytest.raises(MigrationFileError, match=r"^migration 0030_x\.sql: ") as caught:
        parse("0030_x", text)
    assert named in str(caught.value)


def test_an_index_on_a_table_the_file_creates_may_be_built_in_the_transaction() -> None:
    m = parse("0030_x", "CREATE TABLE t (a int);\nCREATE INDEX t_a ON t (a);")
    assert len(statements(m.transactional)) == 2
    # A constraint taking an index built CONCURRENTLY before builds nothing.
    taken = "ALTER TABLE jobs ADD CONSTRAINT u UNIQUE USING INDEX jobs_u;"
    assert len(statements(parse("0030_x", taken).transactional)) == 1
    # Released files are not held to it (0019 built its indexes plainly).
    assert parse("0019_scale_indexes", "CREATE INDEX jobs_a ON jobs (a);").online == ()
