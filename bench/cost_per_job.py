"""Cost per job beside each peer's, and issue 37's targets (bench/run.py, bench/report.py).

Each measured phase (tasklease 1 job/request and 10 jobs/request, Celery strict and
recommended, procrastinate) records under ``cost_per_job`` what a job cost there: CPU ms
of the process that takes the job in (tasklease's API; the peer's producer, the
benchmark's own process while it sends), of the workers (every worker process and its
children: Celery's prefork pool too), of PostgreSQL's server (the postmaster and its
backends) and of the carrier's server (moto, LocalStack or redis-server), each from
/proc before and after the phase (bench/cpu_meter.py); PostgreSQL's execution ms
(pg_stat_statements' total_exec_time, the benchmark's own statements left out) and the
broker requests (the counting proxy's SQS actions, empty receives apart; Redis: the
commands the client sends, from INFO commandstats). This module gathers them into one
table, one row per system, and checks the issue's targets against the run's figures.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rich import box
from rich.markup import escape
from rich.table import Column, Table

# (key in the results, the row's name): tasklease's two submission modes, then the peers.
SYSTEMS = (
    ("tasklease", "tasklease, 1 job/request"),
    ("tasklease_batch_submit", "tasklease, 10 jobs/request"),
    ("celery", "celery strict"),
    ("celery_recommended", "celery recommended"),
    ("procrastinate", "procrastinate"),
)

# The systems' names as the terminal's columns, on two lines each.
SHORT = {
    "tasklease, 1 job/request": "tasklease\n1/req",
    "tasklease, 10 jobs/request": "tasklease\n10/req",
    "celery strict": "celery\nstrict",
    "celery recommended": "celery\nrecomm.",
    "procrastinate": "procras-\ntinate",
}

# (key in a system's figures, the column's title)
COLUMNS = (
    ("jobs_per_s", "jobs/s"),
    ("producer_cpu_ms", "API/producer CPU ms/job"),
    ("workers_cpu_ms", "worker CPU ms/job"),
    ("pg_exec_ms", "PG exec ms/job"),
    ("pg_server_cpu_ms", "PG server CPU ms/job"),
    ("broker_requests", "broker requests/job"),
    ("empty_receives", "+ empty receives/job"),
    ("broker_server_cpu_ms", "SQS server CPU ms/job"),
    ("total_cpu_ms", "total CPU ms/job"),
    ("own_cpu_ms", "total less the SQS server, CPU ms/job"),
)
FIGURES = ("producer_cpu_ms", "workers_cpu_ms", "pg_exec_ms", "pg_server_cpu_ms")

# What a total CPU ms/job adds up: the processes a deployment runs (the counting proxy,
# the benchmark's own, is left out).
TOTAL_OF = ("producer_cpu_ms", "workers_cpu_ms", "pg_server_cpu_ms", "broker_server_cpu_ms")

FLOOR_TARGET = 0.6  # issue 37's bar for the single-submission floor ratio (issue 18's: 0.7)
BROKER_TARGET = 0.8  # 10 jobs/request against the raw broker cycle
QUIET_TARGET = 2.0  # the quiet tenant's p95 behind a flood, over its p95 idle


def measured(
    cpu_ms: Mapping[str, Any],
    pg_exec_ms: float | None,
    jobs: int,
    *,
    producer: str = "api",
    producer_jobs: int | None = None,
) -> dict[str, Any]:
    """A phase's cost per job from its CPU meter's ms per job (``<group>_cpu_ms``) and
    PostgreSQL's execution ms over the phase (None: not measured; 0: none used)."""
    per = round(pg_exec_ms / jobs, 3) if pg_exec_ms is not None and jobs else None
    out = {
        "producer": producer,
        "producer_cpu_ms": cpu_ms.get(f"{producer}_cpu_ms"),
        "workers_cpu_ms": cpu_ms.get("workers_cpu_ms"),
        "pg_exec_ms": per,
        "pg_server_cpu_ms": cpu_ms.get("pg_server_cpu_ms"),
        "broker_server_cpu_ms": cpu_ms.get("broker_server_cpu_ms"),
        "proxy_cpu_ms": cpu_ms.get("proxy_cpu_ms"),
        "window_s": cpu_ms.get("window_s"),
    }
    if producer_jobs is not None:
        out["producer_jobs"] = producer_jobs
    return out


def _broker_requests(phase: Mapping[str, Any]) -> tuple[float | None, float | None]:
    """(requests per job, empty receives per job) from a phase's counts."""
    sqs = phase.get("sqs_requests_per_job")
    if sqs:
        return sqs.get("total"), sqs.get("by_action", {}).get("ReceiveMessage(empty)")
    redis = phase.get("redis_commands_per_job")
    if redis:
        return redis.get("client_total"), None
    return None, None


def system_figures(phase: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """One system's row: jobs/s and its cost per job; None when it did not run."""
    if not phase or phase.get("jobs_per_s") is None:
        return None
    cost = dict(phase.get("cost_per_job") or {})
    requests, empty = _broker_requests(phase)
    if cost.get("broker_requests") is None:
        cost["broker_requests"] = requests
    parts: list[float] = [cost[k] for k in TOTAL_OF if cost.get(k) is not None]
    return {
        "jobs_per_s": phase["jobs_per_s"],
        **{k: cost.get(k) for k in FIGURES},
        "broker_requests": cost["broker_requests"],
        "empty_receives": empty,
        "broker_server_cpu_ms": cost.get("broker_server_cpu_ms"),
        "total_cpu_ms": round(sum(parts), 3) if len(parts) == len(TOTAL_OF) else None,
        "own_cpu_ms": _own(cost),
        "proxy_cpu_ms": cost.get("proxy_cpu_ms"),
        **({"note": cost["note"]} if cost.get("note") else {}),
    }


def _own(cost: Mapping[str, Any]) -> float | None:
    """What a job cost the system's own processes: the total less the carrier's server,
    which a managed SQS runs off the user's cores (procrastinate has none: its total)."""
    parts = [cost.get(k) for k in TOTAL_OF if k != "broker_server_cpu_ms"]
    if any(v is None for v in parts):
        return None
    return round(sum(v for v in parts if v is not None), 3)


def table_figures(r: Mapping[str, Any]) -> dict[str, Any]:
    """The results' ``cost_per_job``: each system's row (None: not run), by key."""
    rows = {}
    for key, name in SYSTEMS:
        figures = system_figures(r.get(key))
        rows[key] = {"system": name, **figures} if figures else {"system": name, "skipped": True}
    return rows


def _cell(v: Any) -> str:
    """A figure for the tables: two decimals at most (the JSON keeps them all)."""
    if v is None:
        return "—"
    return f"{round(v, 2):g}" if isinstance(v, float) else str(v)


def table_rows(cost: Mapping[str, Any]) -> tuple[list[str], list[list[str]], list[str]]:
    """Header, body and footnotes of the cost-per-job table from ``cost_per_job``."""
    header = ["system", *(title for _, title in COLUMNS)]
    body: list[list[str]] = []
    notes: list[str] = []
    for key, name in SYSTEMS:
        row = cost.get(key) or {"skipped": True}
        if row.get("skipped"):
            body.append([name, "not run", *("" for _ in COLUMNS[1:])])
            continue
        body.append([name, *(_cell(row.get(k)) for k, _ in COLUMNS)])
        if row.get("note"):
            notes.append(f"{name}: {row['note']}")
    return header, body, notes


TITLE = (
    "Cost per job (CPU from /proc before and after each phase; PG exec: pg_stat_statements; "
    "broker requests: the counting proxy, empty receives apart, or the client's Redis "
    "commands; total: API/producer + workers + PG server + SQS server)"
)


def rich_table(r: Mapping[str, Any]) -> Table | None:
    """The terminal's table: the same figures turned on their side (a column per
    system), which 80 characters hold."""
    cost = r.get("cost_per_job")
    if not cost:
        return None
    header, body, notes = table_rows(cost)
    tb = Table(
        "per job",
        *(Column(SHORT.get(row[0], row[0]), justify="right") for row in body),
        box=box.SIMPLE_HEAD,
        title=TITLE,
        title_justify="left",
        caption="\n".join(notes) if notes else None,
        caption_justify="left",
    )
    for i, title in enumerate(header[1:], start=1):
        tb.add_row(escape(title.removesuffix("/job")), *(escape(row[i]) for row in body))
    return tb


def markdown(r: Mapping[str, Any]) -> list[str]:
    """The table's lines in latest.md (nothing when the run has none)."""
    cost = r.get("cost_per_job")
    if not cost:
        return []
    header, body, notes = table_rows(cost)
    return [
        f"{TITLE}:",
        "",
        "| " + " | ".join(header) + " |",
        "|---|" + "---:|" * (len(header) - 1),
        *("| " + " | ".join(row) + " |" for row in body),
        "",
        *(f"- {n}" for n in notes),
        *([""] if notes else []),
    ]


# --- issue 37's targets -----------------------------------------------------------


def _target(key: str, target: str, measured: str, met: bool | None) -> dict[str, Any]:
    return {"key": key, "target": target, "measured": measured, "met": met}


def _jobs(r: Mapping[str, Any], key: str) -> float | None:
    return (r.get(key) or {}).get("jobs_per_s")


def _vs(a: float | None, b: float | None) -> str:
    ratio = f" ({a / b:.2f}x)" if a and b else ""
    return f"{_cell(a)} vs {_cell(b)} jobs/s{ratio}"


def _cpu_beside(r: Mapping[str, Any]) -> str:
    """The CPU a job cost each side, for the reader of the jobs/s verdict: on cores both
    share with the SQS server, tasklease's jobs/s can pass procrastinate's only when its
    total, the SQS server's share included, is the smaller."""
    cost = r.get("cost_per_job") or {}
    t, p = cost.get("tasklease_batch_submit") or {}, cost.get("procrastinate") or {}
    if t.get("total_cpu_ms") is None or p.get("total_cpu_ms") is None:
        return ""
    return (
        f"; CPU ms/job: tasklease {_cell(t['total_cpu_ms'])} "
        f"({_cell(t.get('own_cpu_ms'))} less the SQS server's "
        f"{_cell(t.get('broker_server_cpu_ms'))}), procrastinate {_cell(p['total_cpu_ms'])}"
    )


def targets(r: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Issue 37's targets against this run: each one met (True), missed (False) or not
    measured in it (None: a phase skipped)."""
    out = []
    t, c = _jobs(r, "tasklease"), _jobs(r, "celery_recommended")
    out.append(
        _target(
            "single_vs_celery_recommended",
            "1 job/request: jobs/s ≥ celery recommended's",
            _vs(t, c),
            None if t is None or c is None else t >= c,
        )
    )
    ratio = r.get("ratio_to_broker_batch_submit")
    out.append(
        _target(
            "batch_vs_broker",
            f"10 jobs/request: ≥ {BROKER_TARGET:g} x the raw broker cycle",
            f"{_cell(ratio)} x ({_cell(_jobs(r, 'tasklease_batch_submit'))} jobs/s, "
            f"{_cell((r.get('broker_limit') or {}).get('msgs_per_s'))} msgs/s)",
            None if ratio is None else ratio >= BROKER_TARGET,
        )
    )
    b, p = _jobs(r, "tasklease_batch_submit"), _jobs(r, "procrastinate")
    out.append(
        _target(
            "batch_vs_procrastinate",
            "10 jobs/request: jobs/s > procrastinate's",
            _vs(b, p) + _cpu_beside(r),
            None if b is None or p is None else b > p,
        )
    )
    floor = (r.get("single_submission_floor") or {}).get("ratio")
    out.append(
        _target(
            "floor_ratio",
            f"single-submission floor ratio ≥ {FLOOR_TARGET:g}",
            _cell(floor),
            None if floor is None else floor >= FLOOR_TARGET,
        )
    )
    quiet = ((r.get("noisy_neighbour") or {}).get("tenants")) or {}
    q = quiet.get("p95_ratio")
    started = quiet.get("started", {}).get("busy")
    out.append(
        _target(
            "quiet_tenant_p95",
            f"quiet tenant p95 behind a flood ≤ {QUIET_TARGET:g} x idle",
            f"{_cell(q)} x ({_cell(started)}/{_cell(quiet.get('jobs'))} started)",
            None if q is None else q <= QUIET_TARGET and started == quiet.get("jobs"),
        )
    )
    k = r.get("kill_run")
    out.append(
        _target(
            "kill_run",
            "kill run: 0 lost, 0 completed twice, 0 effects missing or twice",
            f"{k['not_succeeded']} lost, {k['completed_twice']} twice, "
            f"{k['effects_not_once']} effects off"
            if k
            else "not run",
            None
            if not k
            else not (k["not_succeeded"] or k["completed_twice"] or k["effects_not_once"]),
        )
    )
    return out


def verdict(met: bool | None) -> str:
    return "not measured" if met is None else "met" if met else "MISSED"


def target_rows(r: Mapping[str, Any]) -> list[tuple[str, str]]:
    """The targets' lines in the report's measure/value table, as the floor's are printed."""
    return [
        (f"target (issue 37): {t['target']}", f"{t['measured']}: {verdict(t['met'])}")
        for t in r.get("targets") or []
    ]
