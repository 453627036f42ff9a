"""The peers' rows of the benchmark's table (bench/report.py): Celery strict and
recommended and procrastinate, each beside tasklease in the same run."""

from __future__ import annotations

import json
from typing import Any


def _fmt(v: Any) -> str:
    return "—" if v is None else str(v)


def _ratio(a: float | None, b: float | None) -> str:
    return f"{a / b:.2f}" if a and b else "—"


GUARANTEES = {
    "celery": "acks_late: a SIGKILLed worker's task comes back after the visibility timeout "
    "(30 s) and runs again from the start; no effects table, so its effects can happen twice",
    "procrastinate": "a SIGKILLed worker's job stays 'doing' until the application's own "
    "periodic task retries stalled jobs (no heartbeat for 30 s: get_stalled_jobs + "
    "retry_job, procrastinate's docs); then it runs again from the start, no effects table",
}


def peer_rows(r: dict[str, Any]) -> list[tuple[str, str]]:
    """The peers in the same run: each one's settings, jobs/s, latency and cost per job,
    and tasklease's as ratios (tasklease / peer: above 1 is faster for jobs/s; below 1 is
    quicker or cheaper for latency and cost), with which guarantee each keeps."""
    t = r["tasklease"]
    t_sqs = (t.get("sqs_requests_per_job") or {}).get("total")
    t_p50 = t["latency_ms"]["p50"]
    k = r.get("kill_run")
    kept = (
        f"kill run: {k['not_succeeded']} lost, {k['completed_twice']} completed twice, "
        f"{k['effects_not_once']} with an effect missing or twice"
        if k
        else "kill run not run (--no-kill)"
    )
    out = [("peers: tasklease (1 job/request) keeps", f"exactly-once effects; {kept}")]
    for key, name in (("celery", "celery strict"), ("celery_recommended", "celery recommended")):
        c = r.get(key) or {}
        if c.get("jobs_per_s") is None:
            out.append((f"{name} jobs/s", f"skipped: {c.get('skipped')}"))
            continue
        sqs = (c.get("sqs_requests_per_job") or {}).get("total")
        cmds = (c.get("redis_commands_per_job") or {}).get("total")
        capped = f"  [{c['capped']}]" if c.get("capped") else ""
        if c.get("sqs_counts_partial"):
            capped += f"  [PARTIAL: {c['sqs_counts_partial']}]"
        lat = c.get("latency_ms") or {}
        out += [
            (f"{name}: settings", json.dumps(c.get("config"), separators=(", ", ": "))),
            (
                f"{name}: jobs/s · p50 / p95 ms · {'SQS requests' if sqs else 'Redis commands'}/job",
                f"{c['jobs_per_s']} · {_fmt(lat.get('p50'))} / {_fmt(lat.get('p95'))} · "
                f"{_fmt(sqs or cmds)}  on {c['broker']}{capped}",
            ),
            (
                f"  tasklease / {name}: jobs/s · p50 · SQS requests/job",
                f"{_ratio(t['jobs_per_s'], c['jobs_per_s'])} · {_ratio(t_p50, lat.get('p50'))}"
                f" · {_ratio(t_sqs, sqs)}",
            ),
            (f"  {name} keeps", GUARANTEES["celery"]),
        ]
    p = r.get("procrastinate") or {}
    if p.get("jobs_per_s") is None:
        return [*out, ("procrastinate jobs/s", f"skipped: {p.get('skipped')}")]
    lat = p["latency_ms"]
    return [
        *out,
        (
            f"procrastinate {p['version']}: settings",
            json.dumps(p["config"], separators=(", ", ": ")),
        ),
        (
            "procrastinate: jobs/s · p50 / p95 ms · PG statements/job",
            f"{p['jobs_per_s']} · {_fmt(lat['p50'])} / {_fmt(lat['p95'])} · "
            f"{p['pg_round_trips_per_job']}  ({p['done']}/{p['jobs']} in {p['database']})",
        ),
        (
            "  tasklease / procrastinate: jobs/s · p50 · PG statements/job",
            f"{_ratio(t['jobs_per_s'], p['jobs_per_s'])} · {_ratio(t_p50, lat['p50'])} · "
            f"{_ratio(t['pg_round_trips_per_job'], p['pg_round_trips_per_job'])}"
            + (f" (tasklease also sends {t_sqs} SQS requests/job)" if t_sqs else ""),
        ),
        ("  procrastinate keeps", GUARANTEES["procrastinate"]),
    ]
