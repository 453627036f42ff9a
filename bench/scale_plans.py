"""The hot queries, each with the parameters the app gives it (app/store/sql's text,
bound as the store binds it), for EXPLAIN: the scale phase prints their plans on the
large database (bench/scale.py) and tests/integration/test_query_plans.py checks that
none scans jobs, job_events or effects sequentially."""

from __future__ import annotations

import datetime as dt
import json
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import psycopg
from psycopg.types.json import Jsonb

from app.services import filters
from app.store import admission
from app.store.pool import q

# The tables a plan must never read whole.
BIG_TABLES = frozenset({"jobs", "job_events", "effects"})


@dataclass(frozen=True)
class Hot:
    label: str
    name: str  # the query's name in app/store/sql/queries
    params: dict[str, Any]
    writes: bool = False  # EXPLAIN ANALYZE of it runs in a transaction rolled back


def sample(conn: psycopg.Connection[Any], tenant: str) -> dict[str, Any]:
    """Real values to bind: one of ``tenant``'s jobs, and the (created_at, id) of a job
    halfway down its listing (a deep cursor's position)."""
    row = conn.execute(
        "SELECT id, created_at FROM jobs WHERE tenant = %s ORDER BY created_at DESC, id DESC "
        "OFFSET (SELECT count(*) / 2 FROM jobs WHERE tenant = %s) LIMIT 1",
        (tenant, tenant),
    ).fetchone()
    assert row is not None, f"no jobs of {tenant!r} to sample"
    payload = conn.execute("SELECT payload FROM jobs WHERE id = %s", (row[0],)).fetchone()
    assert payload is not None
    return {
        "job_id": row[0],
        "deep_created": row[1],
        "deep_id": row[0],
        # A payload field's value (the fill's payloads: {"n": number, "text": md5}).
        "text": payload[0].get("text", ""),
        "n": payload[0].get("n", 0),
    }


def hot_queries(tenant: str, s: dict[str, Any]) -> list[Hot]:
    """Each hot query with its parameters."""

    # One submission of a no-op job, as the API makes it.
    submit: dict[str, Any] = {
        "tenant": tenant,
        "ids": [uuid.uuid4()],
        "kinds": ["demo.noop"],
        "payloads": [Jsonb({})],
        "max_attempts": [3],
        "timeouts": [300],
        "idempotency_keys": [None],
        "request_hashes": ["x"],
        "run_ats": [None],
        "delays": [None],
        "trace_contexts": [None],
        "priorities": ["normal"],
        "deadlines": [None],
        "deadline_seconds": [None],
        "rerun_ofs": [None],
        "forked_froms": [None],
        "fork_steps": [None],
        "notes": [None],
        "flow_keys": [None],
        "key_concurrencies": [None],
        "key_rates": [None],
        "key_rate_seconds": [None],
        "debounces": [None],
        "rate": 50.0,
        "burst": 100,
        "max_in_flight": 10_000,
        "max_running": 100,
        "window_per_slot": 2,
        "key_id": None,
    }

    def listing(scope: str | None, state: str | None, deep: bool = False) -> dict[str, Any]:
        return {
            "tenant": scope,
            "state": state,
            "kind": None,
            "after_created": s["deep_created"] if deep else None,
            "after_id": s["deep_id"] if deep else None,
            "limit": 51,
        }

    def search(scope: str | None, **given: Any) -> dict[str, Any]:
        """search_jobs's parameters for this filter (app/services/filters.py)."""
        params = filters.parse(given).params(scope=scope)
        payload = params["payload"]
        return {
            **params,
            "payload": Jsonb(payload) if payload is not None else None,
            "after_created": None,
            "after_id": None,
            "limit": 51,
        }

    one = [s["job_id"]]
    token = uuid.uuid4()
    redrive = {"redrive_budget": 3, "redrive_window": 86400.0}
    hot = [
        Hot("list: tenant, first page", "list_jobs", listing(tenant, None)),
        Hot("list: tenant, state=cancelled", "list_jobs", listing(tenant, "cancelled")),
        Hot("list: tenant, state=dead_lettered", "list_jobs", listing(tenant, "dead_lettered")),
        Hot("list: tenant, deep cursor", "list_jobs", listing(tenant, None, deep=True)),
        Hot("list: tenant, state, deep cursor", "list_jobs", listing(tenant, "succeeded", True)),
        Hot("list: all tenants, first page", "list_jobs", listing(None, None)),
        Hot("list: all tenants, deep cursor", "list_jobs", listing(None, None, deep=True)),
        Hot("list: all tenants, state=dead_lettered", "list_jobs", listing(None, "dead_lettered")),
        Hot(
            "dead letters: tenant",
            "dead_letters",
            {"tenant": tenant, "kind": None, "ids": None, "limit": 51},
        ),
        Hot(
            "dead letters: all",
            "dead_letters",
            {"tenant": None, "kind": None, "ids": None, "limit": 51},
        ),
        Hot("get job", "get_job", {"id": s["job_id"]}),
        Hot("job events", "job_events", {"id": s["job_id"]}),
        Hot(
            "submit (admission + insert)",
            "insert_jobs",
            {**submit, **admission.UNKNOWN},
            writes=True,
        ),
        Hot(
            "submit, its counts bounded by the last (admission + insert)",
            "insert_jobs",
            {
                **submit,
                "known_at": dt.datetime.now(dt.UTC) - dt.timedelta(seconds=0.3),
                "known_recent": 10,
                "known_flight": 10,
            },
            writes=True,
        ),
        Hot(
            "claim",
            "claim_batch",
            {
                "ids": one,
                "tokens": [token],
                "generations": [None],
                "owner": "explain",
                "lease_seconds": 60.0,
                **redrive,
                "refusal": "redrive budget used up",
                "max_running": 100,
            },
            writes=True,
        ),
        Hot(
            "start", "start_batch", {"ids": one, "tokens": [token], "versions": ["1"]}, writes=True
        ),
        Hot(
            "complete",
            "succeed_batch",
            {"ids": one, "tokens": [token], "results": [Jsonb({})]},
            writes=True,
        ),
        Hot("sweeper: stalled leases", "mark_stalled", {"grace": 5.0, "limit": 500}, writes=True),
        Hot("sweeper: orphans", "cancel_orphans", {"limit": 500}, writes=True),
        Hot("sweeper: answered waits", "stuck_waits", {"grace": 30.0, "limit": 500}, writes=True),
        Hot(
            "sweeper: deadlines passed",
            "expire_unheld",
            {"limit": 500, "reason": "deadline passed"},
            writes=True,
        ),
        Hot("sweeper: parked tenants", "parked_tenants", {"limit": 500}),
        Hot(
            "sweeper: release parked",
            "release_parked",
            {"tenants": [tenant], "max_running": 100},
            writes=True,
        ),
        Hot("sweeper: unsent outbox", "take_unsent_outbox", {"grace": 5.0, "limit": 500}),
        Hot(
            "sweeper: due wake-ups",
            "due_wakeups",
            {"cap": 900.0, "grace": 60.0, "limit": 500},
            writes=True,
        ),
        Hot("sweeper: lost messages", "touch_lost", {"age": 900.0, "limit": 500}, writes=True),
        Hot(
            "sweeper: dead letters accounted",
            "dlq_accounted",
            {"depth": 0, "retention": 1_209_600.0},
            writes=True,
        ),
    ]
    # GET /v1/charts?window=week: hours from a week ago (app/services/charts.py).
    week = {"width": 3600, "since": dt.datetime.now(dt.UTC) - dt.timedelta(days=7), "kind": None}
    # Search (GET /v1/jobs with a filter): each way in from its index.
    prefix = str(s["job_id"])[:6]
    hot += [
        Hot("search: payload field", "search_jobs", search(tenant, payload={"text": s["text"]})),
        Hot("search: payload field, all", "search_jobs", search(None, payload={"n": s["n"]})),
        Hot("search: id prefix", "search_jobs", search(tenant, id_prefix=prefix)),
        Hot("search: id prefix, all", "search_jobs", search(None, id_prefix=prefix)),
        Hot("search: idempotency key", "search_jobs", search(tenant, idempotency_key="key-5")),
        Hot("search: idempotency key, all", "search_jobs", search(None, idempotency_key="key-5")),
        Hot("search: flow key", "search_jobs", search(tenant, key="conversation-5")),
        Hot("search: flow key, all", "search_jobs", search(None, key="conversation-5")),
        Hot(
            "search: kind and states",
            "search_jobs",
            search(tenant, kind="demo.noop", states=["dead_lettered", "cancelled"]),
        ),
    ]
    hot += [
        Hot("/metrics: jobs by state and kind", "gauges_jobs_by_state_and_kind", {}),
        Hot("overview: a tenant", "overview", {"tenant": tenant}),
        Hot("overview: all tenants", "overview", {"tenant": None}),
        Hot("kinds: counts of a tenant", "counts_by_kind", {"tenant": tenant}),
        Hot("kinds: counts of all tenants", "counts_by_kind", {"tenant": None}),
        Hot("workers: the list", "list_workers", {"gone": 60.0, "limit": 500}),
        Hot("sweeper: fold the counts", "fold_job_counts", {}, writes=True),
        Hot("charts: a tenant's week", "chart_rows", {**week, "tenant": tenant}),
        Hot("charts: every tenant's week", "chart_rows", {**week, "tenant": None}),
        Hot("sweeper: fold the charts", "fold_chart_deltas", {}, writes=True),
        Hot(
            "prune: one batch of chart buckets",
            "prune_chart_buckets",
            {"width": 3600, "keep": 8 * 86400, "limit": 500},
            writes=True,
        ),
        Hot(
            "prune: one batch of succeeded jobs",
            "prune_jobs",
            {
                "state": "succeeded",
                "keep": 30 * 86400.0,
                "replay_window": 86400.0,
                "dlq_keep": 14 * 86400.0,
                "limit": 500,
            },
            writes=True,
        ),
    ]
    return hot


def explain(
    conn: psycopg.Connection[Any], hot: Hot, *, analyze: bool = False
) -> tuple[dict[str, Any], str]:
    """(the plan as JSON, the plan as text): EXPLAIN (FORMAT JSON), or with ``analyze``
    EXPLAIN (ANALYZE, BUFFERS) as text (the text shown) then as JSON (the second run: its
    buffers counted, the index entries of rows deleted meanwhile already skipped once),
    each in a transaction rolled back."""
    text = ""
    if analyze:
        with conn.transaction(force_rollback=True):
            cur = conn.execute(b"EXPLAIN (ANALYZE, BUFFERS) " + q(hot.name).encode(), hot.params)
            text = "\n".join(r[0] for r in cur.fetchall())
    options = b"ANALYZE, BUFFERS, FORMAT JSON" if analyze else b"FORMAT JSON"
    with conn.transaction(force_rollback=True):
        cur = conn.execute(b"EXPLAIN (" + options + b") " + q(hot.name).encode(), hot.params)
        row = cur.fetchone()
        assert row is not None
        plan = row[0] if isinstance(row[0], list) else json.loads(row[0])
    return plan[0]["Plan"], text


def nodes(plan: dict[str, Any]) -> Iterator[dict[str, Any]]:
    yield plan
    for child in plan.get("Plans", []):
        yield from nodes(child)


def seq_scans(plan: dict[str, Any]) -> list[str]:
    """The big tables a plan reads whole."""
    return sorted(
        {
            n["Relation Name"]
            for n in nodes(plan)
            if n.get("Node Type") == "Seq Scan" and n.get("Relation Name") in BIG_TABLES
        }
    )
