"""Givens for retention's tests: jobs written straight into the tables, finished (or
made) a given number of days ago, each with a row in every table a prune deletes from."""

from __future__ import annotations

import uuid
from typing import Any

from app.store.retention import TABLES

# Where a prune deletes from, and the column that names the job there.
# The rows old_job writes for one job, by table.
ROWS_OF_ONE_JOB = dict.fromkeys(TABLES, 1) | {"job_events": 2}
JOB_COLUMN = {t: ("id" if t == "jobs" else "job_id") for t in TABLES}


def old_job(
    sql: Any,
    state: str,
    days: float,
    *,
    tenant: str = "acme",
    key: str | None = None,
    parent: uuid.UUID | None = None,
    made_days: float | None = None,
    dead_lettered_by: str | None = None,
) -> uuid.UUID:
    """A job in ``state`` finished ``days`` ago (unfinished ones: made ``days`` ago), with
    two events, an effect, an output row, a sent outbox row and a callback."""
    job_id = uuid.uuid4()
    finished = state in ("succeeded", "cancelled", "dead_lettered")
    made = days if made_days is None else made_days
    sql.execute(
        """
        INSERT INTO jobs (id, tenant, kind, payload, state, attempt, max_attempts,
                          timeout_seconds, idempotency_key, request_hash, parent_id,
                          wait_kind, wait_rule, lease_token, lease_expires_at,
                          dead_lettered_by, created_at, updated_at, finished_at)
        VALUES (%(id)s, %(tenant)s, 'demo.noop', '{}', %(state)s::job_state, 1, 3, 60, %(key)s, 'h',
                %(parent)s,
                CASE WHEN %(state)s::text = 'waiting' THEN 'children' END,
                CASE WHEN %(state)s::text = 'waiting' THEN '{"children": []}'::jsonb END,
                CASE WHEN %(state)s::text IN ('leased', 'running') THEN gen_random_uuid() END,
                CASE WHEN %(state)s::text IN ('leased', 'running') THEN now() + interval '1 hour' END,
                %(by)s, now() - make_interval(secs => %(made)s * 86400),
                now() - make_interval(secs => %(days)s * 86400),
                CASE WHEN %(finished)s THEN now() - make_interval(secs => %(days)s * 86400) END)
        """,
        {
            "id": job_id,
            "tenant": tenant,
            "state": state,
            "key": key,
            "parent": parent,
            "made": made,
            "days": days,
            "finished": finished,
            "by": dead_lettered_by,
        },
    )
    sql.execute(
        "INSERT INTO job_events (job_id, from_state, to_state, attempt) "
        "VALUES (%(id)s, NULL, 'queued', 0), (%(id)s, 'queued', %(state)s::job_state, 1)",
        {"id": job_id, "state": state},
    )
    sql.execute(
        "INSERT INTO effects (job_id, key, seq, result, attempt) VALUES (%s, 'step', 0, '1', 1)",
        (job_id,),
    )
    sql.execute(
        "INSERT INTO job_output (job_id, attempt, type, data) VALUES (%s, 1, 'output', '1')",
        (job_id,),
    )
    sql.execute("INSERT INTO outbox (job_id, sent_at) VALUES (%s, now())", (job_id,))
    sql.execute(
        "INSERT INTO callbacks (token_hash, job_id, key, timeout_seconds, deadline) "
        "VALUES (%s, %s, 'approve', 60, now())",
        (uuid.uuid4().bytes, job_id),
    )
    sql.execute(
        "INSERT INTO job_messages (job_id, topic, body, request_hash) "
        "VALUES (%s, 'user', '\"hi\"', 'h')",
        (job_id,),
    )
    sql.execute(
        "INSERT INTO published_state (job_id, key, value, version, attempt) VALUES (%s, 'step', '1', 1, 1)",
        (job_id,),
    )
    return job_id


def rows_of(sql: Any, job_ids: list[uuid.UUID]) -> dict[str, int]:
    """How many rows each table holds for these jobs."""
    ids = [str(i) for i in job_ids]
    return {
        table: sql.execute(
            f"SELECT count(*) AS n FROM {table} WHERE {column} = ANY(%s::uuid[])",
            (ids,),
        ).fetchone()["n"]
        for table, column in JOB_COLUMN.items()
    }


def counts_by_scan(sql: Any) -> dict[tuple[str, str, str], int]:
    rows = sql.execute(
        "SELECT tenant, kind, state::text AS state, count(*) AS n FROM jobs GROUP BY 1, 2, 3"
    ).fetchall()
    return {(r["tenant"], r["kind"], r["state"]): r["n"] for r in rows}


def counts_maintained(sql: Any) -> dict[tuple[str, str, str], int]:
    rows = sql.execute(
        "SELECT tenant, kind, state::text AS state, sum(n) AS n FROM ("
        " SELECT tenant, kind, state, n FROM job_counts"
        " UNION ALL SELECT tenant, kind, state, n FROM job_count_deltas) AS parts"
        " GROUP BY 1, 2, 3 HAVING sum(n) <> 0"
    ).fetchall()
    return {(r["tenant"], r["kind"], r["state"]): int(r["n"]) for r in rows}
