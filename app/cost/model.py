"""What a job costs on AWS: measured figures (``make cost``: bench/results/cost.json) times
a price table (app/cost/aws_prices.json or ``--prices``). Pure arithmetic; ``tasklease
cost`` (app/cli/cost.py) renders it.

Per job, per kind and submission mode: API Gateway, the API and worker functions'
requests and GB-seconds (each invocation's measured duration rounded up to the
millisecond, plus the model's latency as an explicit assumption), the SQS requests the
code makes by action and those the event source mapping makes (ReceiveMessage,
DeleteMessageBatch), the functions' log bytes (measured) with Lambda's own lines and API
Gateway's access log (estimated), X-Ray traces. Per month (app/cost/fixed.py): the
fixed lines. And the same work as a Lambda durable function (app/cost/durable.py).
The free tier is ignored throughout.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from app.cost.base import (
    ACCESS_LOG_BYTES,
    FLOW_LOG_TRAFFIC,
    PLATFORM_LOG_BYTES,
    TERRAFORM_DEFAULTS,
    WORKER_TIMEOUT_SECONDS,
    Line,
    Options,
    Scenario,
    check_finite,
    check_invocation,
    lambda_line,
    logs_line,
    model_wait_ms,
    xray_line,
)
from app.cost.durable import break_even, break_even_sampled, durable
from app.cost.fixed import SCHEDULE, fixed_lines
from app.cost.memory import worker_memory
from app.cost.prices import PriceTable


def _sqs_lines(label: str, calls: dict[str, int], jobs: int, prices: PriceTable) -> list[Line]:
    each = prices["sqs_standard_request"]
    return [
        Line(f"SQS {action} ({label})", n / jobs * each * 1e6, f"{n / jobs:.3g} per job")
        for action, n in sorted(calls.items())
        if not action.endswith("(empty)")
    ]


def _log_lines(run: dict[str, Any], prices: PriceTable) -> list[Line]:
    jobs = run["jobs"]
    api, worker = run["api"]["invocations"] / jobs, run["worker"]["invocations"] / jobs
    measured = (run["api"]["log_bytes"] + run["worker"]["log_bytes"]) / jobs
    return [
        logs_line("CloudWatch Logs: the functions' lines", measured, prices, " (measured)"),
        logs_line(
            "CloudWatch Logs: Lambda's own lines",
            (api + worker) * PLATFORM_LOG_BYTES,
            prices,
            f" (estimate: START/END/REPORT, {PLATFORM_LOG_BYTES} B per invocation)",
        ),
        logs_line(
            "CloudWatch Logs: API access log",
            api * ACCESS_LOG_BYTES,
            prices,
            f" (estimate: {ACCESS_LOG_BYTES} B per request)",
        ),
    ]


def scenario(
    kind: str,
    mode: str,
    fig: dict[str, Any],
    run: dict[str, Any],
    opts: Options,
    prices: PriceTable,
) -> Scenario:
    """The per-job lines of one measured run (``run``) of ``kind`` (``fig``)."""
    jobs = int(run["jobs"])
    api, worker = run["api"], run["worker"]
    model_ms = model_wait_ms(fig, opts)
    worker_ms = check_invocation(
        f"kinds.{kind}, {mode}: one worker call",
        worker["billed_mean_ms"],
        fig,
        opts,
        (WORKER_TIMEOUT_SECONDS, "the worker function's timeout"),
    )
    s = Scenario(kind, mode)
    s.lines.append(
        Line(
            "API Gateway (HTTP API)",
            api["invocations"] / jobs * prices["api_gateway_http_request"] * 1e6,
            f"{api['invocations'] / jobs:.3g} requests per job",
        )
    )
    s.lines.append(
        lambda_line(
            "Lambda: API function",
            api["invocations"] / jobs,
            api["billed_mean_ms"],
            opts.api_memory_mb,
            prices,
            opts.arch,
        )
    )
    worker_line = lambda_line(
        "Lambda: worker function",
        worker["invocations"] / jobs,
        worker_ms,
        opts.worker_memory_mb,
        prices,
        opts.arch,
    )
    if model_ms:
        worker_line.detail += f" (incl. {model_ms:,} ms model wait)"
    s.lines.append(worker_line)
    code = Counter(api["sqs"]["calls"]) + Counter(worker["sqs"]["calls"])
    s.lines += _sqs_lines("code", dict(code), jobs, prices)
    esm = {k: v for k, v in worker["event_source"].items() if k != "records"}
    s.lines += _sqs_lines("event source mapping", esm, jobs, prices)
    s.lines += _log_lines(run, prices)
    s.lines.append(xray_line((api["invocations"] + worker["invocations"]) / jobs, opts, prices))
    s.db_round_trips_per_job = (api["pg_round_trips"] + worker["pg_round_trips"]) / jobs
    s.invocations_per_job = {
        "API": api["invocations"] / jobs,
        "worker": worker["invocations"] / jobs,
    }
    return s


# The low-traffic run first: at the volumes where durable functions compete (a job every
# second or two across three queues, maximum_batching_window_seconds 0) the event source
# mapping invokes the worker per message. The backlog runs drained a pre-filled queue, so
# every worker call got ten jobs: valid only while a backlog stands.
LOW_TRAFFIC = "one_per_invocation"
MODES = (
    (LOW_TRAFFIC, "submitted singly, 1 job per worker call (low traffic)"),
    ("single", "submitted singly, backlog (worker batches of 10)"),
    ("batch", "submitted in batches of 10, backlog"),
)


def scenarios(figures: dict[str, Any], opts: Options, prices: PriceTable) -> list[Scenario]:
    return [
        scenario(kind, label, fig, fig[key], opts, prices)
        for kind, fig in figures["kinds"].items()
        for key, label in MODES
    ]


def _comparisons(
    figures: dict[str, Any], runs: list[Scenario], fixed: float, opts: Options, prices: PriceTable
) -> list[dict[str, Any]]:
    out = []
    headline = dict(MODES)[LOW_TRAFFIC]
    for kind, fig in figures["kinds"].items():
        d = durable(kind, fig, opts, prices)
        tasklease = {
            s.mode: {
                "usd_per_million": round(s.total, 4),
                **_break_even(s, d, fixed, opts, prices),
                "headline": s.mode == headline,
            }
            for s in runs
            if s.kind == kind
        }
        out.append(
            {
                "kind": kind,
                "durable": _scenario_doc(d),
                "tasklease": tasklease,
                "break_even_jobs_per_month": tasklease[headline]["break_even_jobs_per_month"],
            }
        )
    return out


def _break_even(
    s: Scenario, d: Scenario, fixed: float, opts: Options, prices: PriceTable
) -> dict[str, Any]:
    """The break-even volume and the X-Ray share each function is priced at there: the
    default rule's at that volume's rate, or --xray-sampled as given."""
    if opts.xray_sampled is None:
        jobs, shares = break_even_sampled(s, d, fixed, prices)
    else:
        jobs = break_even(s.total, d.total, fixed)
        shares = {f: opts.xray_sampled for f in s.invocations_per_job | d.invocations_per_job}
    return {
        "break_even_jobs_per_month": _rounded(jobs),
        "xray_sampled_at_break_even": {f: round(x, 4) for f, x in shares.items()},
        "xray_sampling": "default rule at the break-even's rate"
        if opts.xray_sampled is None
        else "--xray-sampled",
    }


def price(figures: dict[str, Any], prices: PriceTable, opts: Options) -> dict[str, Any]:
    """The whole report, as ``tasklease cost --json`` prints it."""
    runs = scenarios(figures, opts, prices)
    fixed = fixed_lines(figures, opts, prices)
    fixed_total = sum(line.usd for line in fixed)
    nat = sum(x.usd for x in fixed if x.name.startswith("NAT gateway"))
    doc = {
        "options": {
            **opts.__dict__,
            "nat_gateway": opts.with_nat,
            "tracing_mode": opts.shape.tracing_mode,
        },
        "prices": {
            "path": prices.path,
            "region": prices.region,
            "date": prices.date,
            "currency": prices.currency,
            "items": {
                k: {"usd": p.usd, "per": p.per, "unit": p.unit, "source": p.source, "note": p.note}
                for k, p in prices.prices.items()
            },
            "not_found": prices.not_found,
        },
        "figures": {"measured_at": figures.get("measured_at"), "notes": figures.get("notes", [])},
        "per_million_jobs": [_scenario_doc(s) for s in runs],
        "fixed_per_month": {
            "lines": [_line_doc(x) for x in fixed],
            "total_usd": round(fixed_total, 4),
            "total_without_nat_gateway_usd": round(fixed_total - nat, 4),
        },
        "durable_functions": _comparisons(figures, runs, fixed_total, opts, prices),
        "worker_memory": worker_memory(figures, opts.worker_memory_mb),
        "assumptions": assumptions(opts),
    }
    check_finite(doc, "report")
    return doc


def _rounded(v: float | None) -> int | None:
    return None if v is None else round(v)


def _line_doc(line: Line) -> dict[str, Any]:
    return {"name": line.name, "usd": round(line.usd, 4), "detail": line.detail}


def _scenario_doc(s: Scenario) -> dict[str, Any]:
    return {
        "kind": s.kind,
        "mode": s.mode,
        "lines": [_line_doc(x) for x in s.lines],
        "total_usd": round(s.total, 4),
        "db_round_trips_per_job": round(s.db_round_trips_per_job, 2),
    }


def assumptions(opts: Options) -> list[str]:
    shape = opts.shape
    nat = (
        f"profile {shape.name}: no NAT gateway counted: the functions reach SQS, Secrets "
        "Manager and the model provider over IPv6 (dual-stack subnets, an egress-only "
        "internet gateway); a provider or webhook reachable only over IPv4 needs "
        "enable_nat_gateway (--nat-gateway)"
        if shape.ipv6_egress and not opts.with_nat
        else "a NAT gateway and its Elastic IP are counted: a model with a latency is a real "
        "provider, which needs enable_nat_gateway (--no-nat-gateway leaves them out)"
        if opts.with_nat
        else "no NAT gateway (the Terraform default): only right for the fake model and no "
        "webhook; a real model provider or webhook needs one (--nat-gateway)"
    )
    return [
        f"profile {shape.name} (Terraform deployment_profile): worker {opts.worker_memory_mb} "
        f"MB, tracing {shape.tracing_mode}, database "
        f"{'Multi-AZ' if shape.db_multi_az else 'Single-AZ'}, "
        f"{'interface endpoints' if shape.interface_endpoints else 'no interface endpoints'}; "
        "each invocation's measured handler time is taken at every memory size: below "
        "1,769 MB a function gets a share of a vCPU in proportion to its memory, so a "
        "CPU-bound handler at 256 MB may take up to 4x its 1,024 MB time (the model's wait "
        "does not change); the worker's memory is checked against each kind's measured peak "
        "(the worker memory line)",
        f"model latency {opts.model_seconds:g} s per model call, billed as worker (and durable "
        "function) duration; the jobs of one worker batch wait for their models at once; "
        "model tokens are not counted (the same on every platform)",
        nat,
        "break-even: from the low-traffic run (one job per worker call): at those volumes "
        "(a few jobs a second over three queues, no batching window) messages arrive apart "
        "and the mapping's pollers take them one at a time, so no batch of 10 shares the "
        "model's wait; the backlog figures hold only while a backlog stands",
        "each invocation's measured handler time, rounded up to 1 ms, the median of the "
        "measured rounds; measured in-process against local servers (loopback SQS and "
        "PostgreSQL): AWS's network adds to it",
        "cold starts (billed INIT) are not counted: per execution environment, not per job",
        f"event source mapping: one ReceiveMessage and one DeleteMessageBatch per worker "
        f"invocation; idle: {opts.esm_pollers} pollers per mapping, {opts.long_poll_seconds} s "
        "long polls, on each of the 3 priority queues",
        _xray_assumption(opts),
        "log bytes: the functions' own lines measured; Lambda's START/END/REPORT lines and "
        "API Gateway's access log line are estimates of typical lines",
        f"the sweeper runs on {SCHEDULE} (infra's schedule); the RDS instance is a fixed "
        "monthly line: database round trips per job are shown, not priced",
        "free tier ignored; no savings plans; SQS messages under 64 KB (one request each)",
        "not counted: RDS Performance Insights and Enhanced Monitoring, backups beyond the "
        "free allowance, interface endpoint and NAT gateway data processing, data transfer, "
        f"the VPC flow log ({FLOW_LOG_TRAFFIC} only, ingested into CloudWatch Logs: its "
        "volume depends on rejected traffic, none measured), CloudWatch Logs storage (every "
        f"log group kept {TERRAFORM_DEFAULTS['log_retention_days']} days, infra's "
        "log_retention_days: a month's ingestion is stored for a year)",
        "durable function: one execution per job started by a direct Invoke (no API "
        "Gateway), one step per effect (at least one), no waits so no replays; its own "
        "work and log lines taken as tasklease's worker's for one job per invocation",
    ]


def _xray_assumption(opts: Options) -> str:
    rule = (
        "X-Ray (tracing Active on every function), each invocation its own trace; the "
        "default rule records the first request each second and 5% of the rest"
    )
    if opts.shape.tracing_mode == "PassThrough":
        return (
            f"X-Ray: tracing PassThrough (profile {opts.shape.name}): a function records a "
            "trace only when its caller passes a sampled trace header; API Gateway HTTP "
            "APIs and EventBridge Scheduler pass none, and the worker follows the API's "
            f"(SQS's AWSTraceHeader), so {opts.traced:.0%} of invocations are priced as "
            "traced (--xray-sampled S prices S); a failed or dead-lettered job is kept in "
            "its history (GET /v1/jobs/{id}) and the logs, not in a trace"
        )
    if opts.xray_sampled is not None:
        return (
            f"{rule}; here {opts.xray_sampled:.0%} of invocations traced (--xray-sampled), in "
            "the tables and at the break-evens; traces retrieved or scanned are not counted"
        )
    return (
        f"{rule}: the per-million tables trace every invocation (as below a request a "
        "second); the break-evens price each function at the share the rule records at "
        "the break-even's own rate, r invocations a second of that function: "
        "min(1, (1 + 0.05 (r - 1)) / r), the volume found where volume, rate and share "
        "agree; simplified: the one-a-second reservoir taken per function and invocations "
        "spread evenly over each second (bursts record fewer); --xray-sampled S prices "
        "everything at S instead; traces retrieved or scanned are not counted"
    )
