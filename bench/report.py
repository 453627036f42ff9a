"""The benchmark's outputs: the rich table, latest.json, latest.md, throughput.png."""

from __future__ import annotations

import json
import os
import platform
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Column, Table

from bench import cost_per_job, floor
from bench.peers_report import peer_rows


def machine() -> dict[str, Any]:
    model = platform.processor() or "?"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {
        "nproc": os.cpu_count(),
        "cpu_model": model,
        "python": platform.python_version(),
        "platform": platform.platform(),
    }


def _fmt(v: Any) -> str:
    return "—" if v is None else str(v)


def _redis(r: dict[str, Any]) -> bool:
    return r["endpoint"].get("transport") == "redis"


def _redis_total(per: dict[str, Any] | None) -> str:
    """A phase's Redis commands per job: server-side (the carrier's own)."""
    if not per:
        return "—"
    return f"{per['total']} ({per['client_total']} sent by the client)"


def _endpoint(r: dict[str, Any]) -> str:
    e = r["endpoint"]
    if _redis(r):
        return f"Redis at {e['url']}, {e['server']} (counts: INFO commandstats)"
    return f"{e['sqs']} at {e['url']} (counted through a proxy)"


def _broker_rows(r: dict[str, Any]) -> list[tuple[str, str]]:
    """The carrier's requests per job (SQS, by action) or commands per job (Redis)."""
    t = r["tasklease"]
    if _redis(r):
        return [
            (
                "Redis commands/job, server-side (client-sent)",
                _redis_total(t["redis_commands_per_job"]),
            ),
            ("  scripts (EVALSHA) /job", str(t["redis_commands_per_job"]["scripts_per_job"])),
            ("  by command: the table below", ""),
        ]
    out: list[tuple[str, str]] = []
    for action, per in t["sqs_requests_per_job"]["by_action"].items():
        batch = t["sqs_entries_per_call"].get(action)
        extra = (
            f"   ({batch} entries/call)"
            if batch is not None and action != "ReceiveMessage(empty)"
            else ""
        )
        out.append((f"  SQS {action} /job", f"{per}{extra}"))
    out.append(("SQS requests/job (total)", str(t["sqs_requests_per_job"]["total"])))
    return out


def rows(r: dict[str, Any]) -> list[tuple[str, str]]:
    t = r["tasklease"]
    redis = _redis(r)
    out = [
        ("endpoint", _endpoint(r)),
        ("machine", f"{r['machine']['nproc']} CPUs, {r['machine']['cpu_model']}"),
        (
            "jobs · workers x concurrency · clients",
            f"{t['jobs']} · {r['config']['workers']} x {r['config']['worker_concurrency']} · {r['config']['clients']}",
        ),
        (
            "tasklease jobs/s",
            f"{t['jobs_per_s']}  ({t['succeeded']}/{t['jobs']} succeeded in {t['elapsed_s']} s)",
        ),
        (
            "latency submit→done p50 / p95 / p99 ms",
            " / ".join(_fmt(t["latency_ms"][k]) for k in ("p50", "p95", "p99")),
        ),
        (
            f"latency p50 / p95 ms at 10% load ({t['light_load']['rate_jobs_per_s']} jobs/s)",
            " / ".join(_fmt(t["light_load"]["latency_ms"][k]) for k in ("p50", "p95")),
        ),
        (
            "  10% load p50 split: accepted→leased / →running / →done ms",
            " / ".join(
                _fmt(t["light_load"].get("latency_p50_breakdown_ms", {}).get(k))
                for k in ("accepted_to_leased", "leased_to_running", "running_to_done")
            ),
        ),
        ("API submit req/s (p50 ms)", f"{t['api_submit_req_per_s']} ({t['api_submit_ms_p50']})"),
    ]
    out += _broker_rows(r)
    out += [
        ("PG round trips/job (statements)", _fmt(t["pg_round_trips_per_job"])),
        ("PG commits/job", _fmt(t["pg_commits_per_job"])),
        (
            "PG round trips/job incl. pool checks",
            _fmt(t.get("pg_round_trips_per_job_incl_pool_checks")),
        ),
        (
            "raw XADD/XREADGROUP/XACK cycle msgs/s" + (" (same consumers, processes)")
            if redis
            else "broker limit msgs/s (raw batched cycle)",
            _fmt(r["broker_limit"].get("msgs_per_s")),
        ),
        ("db limit jobs/s (3 commits, psycopg)", _fmt(r["db_limit"].get("jobs_per_s"))),
        (
            "ratio to the raw cycle" if redis else "ratio to broker limit",
            _fmt(r["ratio_to_broker"]),
        ),
        ("ratio to db limit", _fmt(r["ratio_to_db"])),
    ]
    b = r.get("tasklease_batch_submit")
    if b:
        out += [
            (
                f"batch submit ({b['submit_batch']} jobs/request): jobs/s",
                f"{b['jobs_per_s']}  ({b['succeeded']}/{b['jobs']} succeeded in {b['elapsed_s']} s)",
            ),
            (
                "  ratio to the raw cycle" if redis else "  ratio to broker limit",
                _fmt(r.get("ratio_to_broker_batch_submit")),
            ),
            (
                "  latency p50 / p95 / p99 ms",
                " / ".join(_fmt(b["latency_ms"][k]) for k in ("p50", "p95", "p99")),
            ),
            (
                "  API submit jobs/s (req/s)",
                f"{b['api_submit_jobs_per_s']} ({b['api_submit_req_per_s']})",
            ),
            *(
                [("  Redis commands/job (client)", _redis_total(b["redis_commands_per_job"]))]
                if redis
                else [
                    ("  SQS requests/job (total)", str(b["sqs_requests_per_job"]["total"])),
                    *(
                        (f"    SQS {a} /job", str(v))
                        for a, v in b["sqs_requests_per_job"]["by_action"].items()
                    ),
                ]
            ),
            ("  PG round trips/job (statements)", _fmt(b["pg_round_trips_per_job"])),
        ]
    k = r.get("kill_run")
    if k:
        out.append(
            (
                f"kill run: {k['jobs']} jobs, a worker SIGKILLed at {k['killed_at_s']} s "
                "(the sweeper running, as in production)",
                f"{k['not_succeeded']} lost, {k['completed_twice']} completed twice, "
                f"{k['effects_not_once']} with an effect missing or twice; "
                f"{k['rerun_after_kill']} re-run after the kill; {k['elapsed_s']} s "
                f"(the visibility timeout is {k['visibility_timeout_s']} s)",
            )
        )
    d = t.get("split")
    if d:
        per = (
            f"Redis {_redis_total(d['drain_redis_commands_per_job'])}/job"
            if redis
            else f"SQS {d['drain_sqs_requests_per_job']['total']}/job"
        )
        out += [
            ("API alone (no workers) submit req/s", str(d["api_alone_req_per_s"])),
            (
                f"workers alone: drain of {d['jobs']} queued jobs/s",
                f"{d['drain_jobs_per_s']}  ({per})",
            ),
        ]
    out += peer_rows(r)
    for p in r.get("worker_counts", []):
        out.append((f"  {p['workers']} workers ({p['jobs']} jobs)", f"{p['jobs_per_s']} jobs/s"))
    out += _noisy_rows(r.get("noisy_neighbour"))
    out += floor.rows(r.get("single_submission_floor"))
    out += cost_per_job.target_rows(r)
    for note in r.get("notes", []):
        out.append(("note", note))
    return out


def _noisy_rows(n: dict[str, Any] | None) -> list[tuple[str, str]]:
    """The noisy-neighbour phase: p50 / p95 submit→start, idle against busy."""
    if not n:
        return []

    def line(f: dict[str, Any]) -> str:
        met = ("target met: " if f["target_met"] else "TARGET MISSED: ") + f["target"]
        return (
            f"idle {_fmt(f['idle_ms']['p50'])} / {_fmt(f['idle_ms']['p95'])}, busy "
            f"{_fmt(f['busy_ms']['p50'])} / {_fmt(f['busy_ms']['p95'])}; p95 ratio "
            f"{_fmt(f['p95_ratio'])} ({met}; {f['started']['busy']}/{f['jobs']} started)"
        )

    t, p = n["tenants"], n["priority"]
    return [
        (
            f"noisy neighbour: B's {t['jobs']} jobs behind A's {t['noisy_jobs']} "
            f"(cap {n['running_cap']} of {n['slots']} slots), submit→start p50 / p95 ms",
            line(t),
        ),
        (
            f"priority: {p['jobs']} high behind {p['backlog_jobs']} normal, "
            "submit→start p50 / p95 ms",
            line(p),
        ),
    ]


# The Redis table's columns: (title, where in the results, the per-job figures' key).
REDIS_COLUMNS = (
    ("e2e", ("tasklease",), "redis_commands_per_job"),
    ("10%", ("tasklease", "light_load"), "redis_commands_per_job"),
    ("batch", ("tasklease_batch_submit",), "redis_commands_per_job"),
    ("drain", ("tasklease", "split"), "drain_redis_commands_per_job"),
    ("celery", ("celery",), "redis_commands_per_job"),
)


def redis_commands(r: dict[str, Any]) -> tuple[list[str], list[list[str]]]:
    """Redis commands per job by command and phase (the raw cycle's per message): the
    header and the rows, each command with who sends it in tasklease's runs."""
    from bench.redis_counts import where

    cols: list[tuple[str, dict[str, Any]]] = []
    for title, path, key in REDIS_COLUMNS:
        node: Any = r
        for p in path:
            node = (node or {}).get(p)
        if node and node.get(key):
            cols.append((title, node[key]))
    raw = r["broker_limit"].get("redis_commands_per_message") or {}
    names = sorted(
        {c for _, per in cols for c in per["by_command"]} | set(raw),
        key=lambda c: (-(cols[0][1]["by_command"].get(c, 0) if cols else 0), c),
    )
    header = ["command", "by", *(t for t, _ in cols), "raw/msg"]
    body = [
        [c, where(c), *(_fmt(per["by_command"].get(c)) for _, per in cols), _fmt(raw.get(c))]
        for c in names
    ]
    body.append(
        [
            "total",
            "",
            *(str(per["total"]) for _, per in cols),
            _fmt(round(sum(raw.values()), 3) if raw else None),
        ]
    )
    body.append(
        [
            "client",
            "",
            *(str(per["client_total"]) for _, per in cols),
            _fmt(round(sum(raw.values()), 3) if raw else None),
        ]
    )
    return header, body


def table(r: dict[str, Any]) -> Table:
    tb = Table("measure", "value", title="tasklease benchmark", title_justify="left")
    for k, v in rows(r):
        tb.add_row(escape(k), escape(v))
    pg = r["tasklease"]["pg_statements_per_job"]
    if pg:
        tb.add_section()
        for s in pg[:10]:
            ms = s.get("exec_ms_per_job")
            each = f"{s['per_job']}/job" + (f", {ms} ms/job" if ms is not None else "")
            tb.add_row(escape(f"  pg {each}"), escape(s["query"]))
    return tb


def redis_table(r: dict[str, Any]) -> Table | None:
    """Redis commands per job by command, from INFO commandstats (server-side: a script's
    own commands are counted under their names besides its EVALSHA)."""
    if not _redis(r):
        return None
    header, body = redis_commands(r)
    tb = Table(
        Column(header[0], no_wrap=True),
        *header[1:],
        title="Redis commands per job (INFO commandstats, server-side). by: who sends it in "
        "tasklease's runs ('script': only inside its Lua scripts, one EVALSHA each); "
        "'client' total: all but those; e2e: 1 job/request; 10%: at 10% load; batch: "
        "10 jobs/request; drain: workers alone; raw/msg: the raw cycle's per message",
        title_justify="left",
    )
    for row in body:
        tb.add_row(*(escape(x) for x in row))
    return tb


def write(r: dict[str, Any], out: Path, console: Console) -> None:
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(r, indent=2, default=str) + "\n")
    md = out.with_suffix(".md")
    lines = [
        f"# tasklease benchmark ({r['endpoint']['sqs']}, {r['started_at']})",
        "",
        'Reproduce: `make bench ARGS="' + r["config"]["argv"] + f'"`. Full figures: `{out.name}`.',
        "",
        "| measure | value |",
        "|---|---|",
        *(f"| {k.strip()} | {v} |" for k, v in rows(r)),
        "",
        *cost_per_job.markdown(r),
    ]
    if _redis(r):
        header, body = redis_commands(r)
        lines += [
            "Redis commands per job (INFO commandstats, server-side). by: who sends it in "
            "tasklease's runs (`script`: only inside its Lua scripts, one EVALSHA each); "
            "`client` total: all but those; e2e: 1 job/request; 10%: at 10% load; batch: "
            "10 jobs/request; drain: the workers alone; raw/msg: the raw cycle, per message",
            "",
            "| " + " | ".join(header) + " |",
            "|" + "---|" * len(header),
            *("| " + " | ".join(row) + " |" for row in body),
            "",
        ]
    md.write_text("\n".join(lines))
    console.print(f"results: {out}, {md}", highlight=False)


def plot(
    points: list[dict[str, Any]], path: Path, title: str, *, broker: float | None = None
) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    xs = [p["workers"] for p in points]
    fig, ax = plt.subplots(figsize=(6, 4))
    ax.plot(xs, [p["jobs_per_s"] for p in points], marker="o", label="tasklease, 1 job/request")
    if any(p.get("batch_submit_jobs_per_s") for p in points):
        ax.plot(
            xs,
            [p.get("batch_submit_jobs_per_s") for p in points],
            marker="^",
            label="tasklease, 10 jobs/request",
        )
    if broker:
        ax.axhline(broker, linestyle="--", color="grey", label="raw broker cycle")
    if any(p.get("celery_jobs_per_s") for p in points):
        ax.plot(xs, [p.get("celery_jobs_per_s") for p in points], marker="s", label="celery")
    ax.set_xlabel("worker processes")
    ax.set_ylabel("jobs/s")
    ax.set_xticks(xs)
    ax.set_ylim(bottom=0)
    ax.set_title(title)
    ax.grid(True, alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
