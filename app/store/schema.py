"""The schema as the migrations leave it, as one text (app/store/sql/schema.sql).

Made from the catalog, not by pg_dump: pg_dump's output changes with its version (the
embedded PostgreSQL of `make test` is 18, a developer's server may be 15), and it must
match the server's. The catalog's own functions (pg_get_indexdef, pg_get_constraintdef,
pg_get_functiondef, pg_get_triggerdef) print each object the same way on every supported
version. Objects are sorted by name; columns keep their order in the table.
"""

from __future__ import annotations

from typing import Any, LiteralString

import psycopg

HEADER = """\
-- The schema the migrations (app/store/sql/migrations/) leave in the public schema, read
-- from the catalog of a freshly migrated database. Written by `make schema`; do not edit:
-- tests/integration/test_schema_snapshot.py fails when it and the migrations disagree.
"""

_TYPES = """
SELECT t.typname AS name, array_agg(e.enumlabel ORDER BY e.enumsortorder) AS labels
FROM pg_type t JOIN pg_namespace n ON n.oid = t.typnamespace
JOIN pg_enum e ON e.enumtypid = t.oid
WHERE n.nspname = 'public' GROUP BY t.typname ORDER BY t.typname
"""

_SEQUENCES = """
SELECT s.sequencename AS name, s.data_type::text AS type, s.start_value, s.increment_by
FROM pg_sequences s
WHERE s.schemaname = 'public'
  AND NOT EXISTS (SELECT 1 FROM pg_depend d
                  WHERE d.objid = (quote_ident(s.schemaname) || '.' || quote_ident(s.sequencename))::regclass
                    AND d.deptype = 'i')
ORDER BY s.sequencename
"""

_TABLES = """
SELECT c.oid, c.relname AS name FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE n.nspname = 'public' AND c.relkind IN ('r', 'p') ORDER BY c.relname
"""

_COLUMNS = """
SELECT a.attname AS name, format_type(a.atttypid, a.atttypmod) AS type, a.attnotnull,
       a.attidentity, a.attgenerated, pg_get_expr(d.adbin, d.adrelid) AS expr
FROM pg_attribute a LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
WHERE a.attrelid = %s AND a.attnum > 0 AND NOT a.attisdropped ORDER BY a.attnum
"""

# NOT NULL is a column's (PostgreSQL 18 lists it as a constraint too: contype 'n').
_CONSTRAINTS = """
SELECT conname AS name, pg_get_constraintdef(oid) AS def FROM pg_constraint
WHERE conrelid = %s AND contype IN ('p', 'u', 'c', 'f', 'x') ORDER BY conname
"""

_INDEXES = """
SELECT c.relname AS name, pg_get_indexdef(i.indexrelid) AS def, i.indisvalid
FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE n.nspname = 'public'
  AND NOT EXISTS (SELECT 1 FROM pg_constraint k WHERE k.conindid = i.indexrelid
                  AND k.contype IN ('p', 'u', 'x'))
ORDER BY c.relname
"""

_FUNCTIONS = """
SELECT pg_get_functiondef(p.oid) AS def FROM pg_proc p
JOIN pg_namespace n ON n.oid = p.pronamespace
WHERE n.nspname = 'public' AND p.prokind IN ('f', 'p')
ORDER BY p.proname, pg_get_function_identity_arguments(p.oid)
"""

_TRIGGERS = """
SELECT pg_get_triggerdef(t.oid) AS def FROM pg_trigger t
JOIN pg_class c ON c.oid = t.tgrelid JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE n.nspname = 'public' AND NOT t.tgisinternal ORDER BY c.relname, t.tgname
"""

_VIEWS = """
SELECT c.relname AS name, c.relkind, pg_get_viewdef(c.oid) AS def
FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE n.nspname = 'public' AND c.relkind IN ('v', 'm') ORDER BY c.relname
"""


def snapshot(url: str) -> str:
    """The schema of the database at ``url`` (its public schema), as SQL-like text."""
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("SET search_path = public")

        def rows(query: LiteralString, *params: Any) -> list[tuple[Any, ...]]:
            return conn.execute(query, params).fetchall()

        parts = [HEADER]
        for name, labels in rows(_TYPES):
            quoted = ", ".join(_quote(label) for label in labels)
            parts.append(f"CREATE TYPE {name} AS ENUM ({quoted});\n")
        for name, type_, start, step in rows(_SEQUENCES):
            parts.append(f"CREATE SEQUENCE {name} AS {type_} START {start} INCREMENT {step};\n")
        for oid, name in rows(_TABLES):
            lines = [_column(*col) for col in rows(_COLUMNS, oid)]
            lines += [f"CONSTRAINT {con} {df}" for con, df in rows(_CONSTRAINTS, oid)]
            body = ",\n".join(f"    {line}" for line in lines)
            parts.append(f"CREATE TABLE {name} (\n{body}\n);\n")
        indexes = [f"{df};{'' if valid else '  -- INVALID'}" for _, df, valid in rows(_INDEXES)]
        parts.append("\n".join(indexes) + "\n")
        for (df,) in rows(_FUNCTIONS):
            parts.append(df.rstrip() + ";\n")
        parts.append("\n".join(f"{df};" for (df,) in rows(_TRIGGERS)) + "\n")
        for name, kind, df in rows(_VIEWS):
            what = "MATERIALIZED VIEW" if kind == "m" else "VIEW"
            parts.append(f"CREATE {what} {name} AS\n{df.rstrip()}\n")
    text = "\n".join(parts)
    return "\n".join(line.rstrip() for line in text.splitlines()) + "\n"


def _column(
    name: str, type_: str, not_null: bool, identity: str, generated: str, expr: str | None
) -> str:
    out = f"{name} {type_}"
    if identity:
        out += f" GENERATED {'ALWAYS' if identity == 'a' else 'BY DEFAULT'} AS IDENTITY"
    elif generated == "s":
        out += f" GENERATED ALWAYS AS ({expr}) STORED"
    elif expr is not None:
        out += f" DEFAULT {expr}"
    return out + (" NOT NULL" if not_null else "")


def _quote(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"
