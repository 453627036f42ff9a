"""The hot queries' plans on a database with enough history for the planner to care
(issue 18): none reads jobs, job_events or effects whole. The history is the scale
phase's (bench/scale_fill.sql, 50,000 jobs and their events), the queries and their
parameters the app's (bench/scale_plans.py binds app/store/sql's text as the store
does). Both the custom plan and the generic plan a prepared statement switches to after
five runs are checked for the listing, whose optional filters are where a generic plan
goes wrong. Store only: no carrier."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

from bench import scale_fill
from bench import scale_plans as plans
from tests.conftest import cloned_database

pytestmark = [pytest.mark.integration, pytest.mark.carrier_neutral]

TENANT = "bench"
JOBS = 50_000


@pytest.fixture(scope="module")
def history(pg_admin_url: str, pg_template: str) -> Iterator[str]:
    """One database filled for the module's tests (read only: the writes are EXPLAINed,
    never run)."""
    with cloned_database(pg_admin_url, pg_template) as url:
        scale_fill.fill(url, JOBS, TENANT, waiting=1_000)
        yield url


def test_hot_queries_read_no_big_table_whole(history: str) -> None:
    with psycopg.connect(history, autocommit=True) as conn:
        found = conn.execute("SELECT count(*) FROM jobs").fetchone()
        assert found is not None and found[0] == JOBS
        s = plans.sample(conn, TENANT)
        hot = [h for h in plans.hot_queries(TENANT, s) if h.name != "prune_jobs"]
        assert {h.name for h in hot} >= {
            "list_jobs",
            "dead_letters",
            "insert_jobs",
            "claim_batch",
            "gauges_jobs_by_state_and_kind",
            "overview",
        }
        scans = {h.label: plans.seq_scans(plans.explain(conn, h)[0]) for h in hot}
    assert {label: tables for label, tables in scans.items() if tables} == {}


def test_prune_batch_reads_no_big_table_whole(history: str) -> None:
    with psycopg.connect(history, autocommit=True) as conn:
        s = plans.sample(conn, TENANT)
        (prune,) = [h for h in plans.hot_queries(TENANT, s) if h.name == "prune_jobs"]
        plan = plans.explain(conn, prune)[0]
        # The batch does find its jobs (past the 30 days' retention) from the index.
        assert "jobs_finished" in {n.get("Index Name") for n in plans.nodes(plan)}
    assert plans.seq_scans(plan) == []


def _generic_plan(
    conn: psycopg.Connection[Any], params: dict[str, Any], name: str = "list_jobs"
) -> dict[str, Any]:
    names = list(params)
    body = plans.q(name)
    for i, name in enumerate(names, 1):
        body = body.replace(f"%({name})s", f"${i}")
    with conn.transaction(force_rollback=True):
        conn.execute("SET LOCAL plan_cache_mode = force_generic_plan")
        conn.execute(b"PREPARE listing AS " + body.rstrip(";").encode())
        try:
            literals = ", ".join(["%s"] * len(names))
            # Bound client-side: EXECUTE's arguments are literals.
            row = (
                psycopg.ClientCursor(conn)
                .execute(
                    f"EXPLAIN (FORMAT JSON) EXECUTE listing({literals})".encode(),
                    [params[n] for n in names],
                )
                .fetchone()
            )
        finally:
            conn.execute("DEALLOCATE listing")
    assert row is not None
    plan: dict[str, Any] = row[0][0]["Plan"]
    return plan


def test_listing_generic_plan_reads_only_the_page(history: str) -> None:
    with psycopg.connect(history, autocommit=True) as conn:
        s = plans.sample(conn, TENANT)
        listings = [h for h in plans.hot_queries(TENANT, s) if h.name == "list_jobs"]
        assert len(listings) >= 6
        for hot in listings:
            plan = _generic_plan(conn, hot.params)
            assert plans.seq_scans(plan) == [], hot.label
            # Every scan of jobs that runs is an index range (an Index Cond), not a walk
            # from the newest job filtering rows.
            for node in plans.nodes(plan):
                if node.get("Relation Name") == "jobs" and "Index" in node.get("Node Type", ""):
                    assert "Index Cond" in node, (hot.label, node.get("Index Name"))


# Each way into a search (issue 33), and the index that answers it.
SEARCH_INDEXES = {
    "search: payload field": "jobs_payload_path",
    "search: payload field, all": "jobs_payload_path",
    "search: id prefix": "jobs_pkey",
    "search: id prefix, all": "jobs_pkey",
    "search: idempotency key": "jobs_idempotency",
    "search: idempotency key, all": "jobs_idempotency",
    "search: flow key": "jobs_flow_key",
    "search: flow key, all": "jobs_flow_key",
}


def _indexes(plan: dict[str, Any]) -> set[str]:
    return {n["Index Name"] for n in plans.nodes(plan) if "Index Name" in n}


def test_each_search_is_answered_by_its_index_in_both_plans(history: str) -> None:
    with psycopg.connect(history, autocommit=True) as conn:
        s = plans.sample(conn, TENANT)
        searches = {h.label: h for h in plans.hot_queries(TENANT, s) if h.name == "search_jobs"}
        assert set(SEARCH_INDEXES) <= set(searches)
        for label, hot in searches.items():
            for plan in (plans.explain(conn, hot)[0], _generic_plan(conn, hot.params, hot.name)):
                assert plans.seq_scans(plan) == [], label
                if label in SEARCH_INDEXES:
                    assert SEARCH_INDEXES[label] in _indexes(plan), (label, _indexes(plan))
        # The payload search finds the sampled job (the filter is the one the API builds).
        found = conn.execute(
            plans.q("search_jobs"), searches["search: payload field"].params
        ).fetchall()
        assert s["job_id"] in [row[0] for row in found]
