"""The store: the only package that runs SQL or imports psycopg.

Callers write ``store.jobs.get(db, job_id)``: one module per aggregate (jobs, leases, alerts,
cancels, charts, effects, outbox, keys, tenants, model_limits, dead_letters, deadlines, sweeper_marks,
waits, messages, schedules, streams, state, gauges, retention, search, bulk, workers), each a set of small typed functions taking the
``Database`` (or, with the ``_txn`` suffix, a connection inside the caller's transaction) and answering the records of
``store.records``.
"""

from app.store import (
    alerts,
    bulk,
    cancels,
    charts,
    dead_letters,
    deadlines,
    effects,
    gauges,
    jobs,
    keys,
    leases,
    messages,
    model_limits,
    outbox,
    records,
    retention,
    schedules,
    search,
    state,
    streams,
    sweeper_marks,
    tenants,
    waits,
    workers,
)
from app.store.pool import Conn, Database, connect, ensure_database, migrate, redact

__all__ = [
    "Conn",
    "Database",
    "alerts",
    "bulk",
    "cancels",
    "charts",
    "connect",
    "dead_letters",
    "deadlines",
    "effects",
    "ensure_database",
    "gauges",
    "jobs",
    "keys",
    "leases",
    "messages",
    "migrate",
    "model_limits",
    "outbox",
    "records",
    "redact",
    "retention",
    "schedules",
    "search",
    "state",
    "streams",
    "sweeper_marks",
    "tenants",
    "waits",
    "workers",
]
