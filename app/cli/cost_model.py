"""What a job costs on AWS: measured figures (``make cost``: bench/results/cost.json) times
a price table (app/cli/aws_prices.json or ``--prices``). Pure arithmetic, no I/O beyond
reading the two files; ``tasklease cost`` (app/cli/cost.py) renders it.

Per job, per kind and submission mode: API Gateway, the API and worker functions'
requests and GB-seconds (each invocation's measured duration rounded up to the
millisecond, plus the model's latency as an explicit assumption), the SQS requests the
code makes by action and those the event source mapping makes (ReceiveMessage,
DeleteMessageBatch), the functions' log bytes. Per month: the RDS instance and storage,
the interface endpoints, the secret, the idle sweeper (scheduler, invocations, its
requests) and the event source mappings' idle long polling. And the same work as a Lambda
durable function at its published prices. The free tier is ignored throughout.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from app import errors
from app.cli.cost_prices import PriceTable
from app.config import SHARED

HOURS_PER_MONTH = 730  # AWS's own convention on its pricing pages
GB = 1024**3

# infra/variables.tf's defaults (tests/infra/test_cost_defaults.py fails on drift).
TERRAFORM_DEFAULTS: dict[str, Any] = {
    "lambda_architecture": "arm64",
    "api_memory_mb": 512,
    "worker_memory_mb": 1024,
    "sweeper_memory_mb": 256,
    "db_instance_class": "db.t4g.micro",
    "db_allocated_storage_gb": 20,
    "db_multi_az": False,
    "enable_nat_gateway": False,
    "sweeper_schedule_expression": "rate(1 minute)",
}
# infra/network.tf: interface endpoints for sqs and secretsmanager, in each of the two
# default availability zones; infra/locals.tf: one source queue (and event source
# mapping) per priority.
INTERFACE_ENDPOINTS = 2
AVAILABILITY_ZONES = 2
PRIORITY_QUEUES = 3
SWEEPS_PER_MONTH = 60 * HOURS_PER_MONTH  # rate(1 minute)
# The worker function's timeout (app/shared_settings.json, which infra/locals.tf reads):
# a model wait longer than that times the worker out rather than billing it.
WORKER_TIMEOUT_SECONDS = int(SHARED["worker_timeout_seconds"])


@dataclass(frozen=True)
class Options:
    arch: str = TERRAFORM_DEFAULTS["lambda_architecture"]
    api_memory_mb: int = TERRAFORM_DEFAULTS["api_memory_mb"]
    worker_memory_mb: int = TERRAFORM_DEFAULTS["worker_memory_mb"]
    sweeper_memory_mb: int = TERRAFORM_DEFAULTS["sweeper_memory_mb"]
    model_seconds: float = 2.0  # per model call, billed while the worker waits for it
    esm_pollers: int = 5  # per event source mapping while the queue is empty
    long_poll_seconds: int = 20
    durable_retention_days: int = 14  # durable functions' default RetentionPeriodInDays
    db_storage_gb: int = TERRAFORM_DEFAULTS["db_allocated_storage_gb"]
    nat_gateway: bool = TERRAFORM_DEFAULTS["enable_nat_gateway"]

    def __post_init__(self) -> None:
        if self.arch not in ("arm64", "x86_64"):
            raise errors.ConfigError(f"arch: arm64 or x86_64, got {self.arch!r}")
        for name in ("api_memory_mb", "worker_memory_mb", "sweeper_memory_mb"):
            mb = getattr(self, name)
            if not 128 <= mb <= 10240:
                raise errors.ConfigError(f"{name}: Lambda takes 128 to 10240 MB, got {mb}")
        if not 0 <= self.model_seconds <= WORKER_TIMEOUT_SECONDS:  # False for nan
            raise errors.ConfigError(
                f"model_seconds: 0 to {WORKER_TIMEOUT_SECONDS} (the worker function's "
                f"timeout), got {self.model_seconds}"
            )


@dataclass
class Line:
    name: str
    usd: float  # per million jobs, or per month for a fixed line
    detail: str = ""


@dataclass
class Scenario:
    kind: str
    mode: str
    lines: list[Line] = field(default_factory=list)
    db_round_trips_per_job: float = 0.0

    @property
    def total(self) -> float:
        return sum(line.usd for line in self.lines)


def gb_seconds(memory_mb: int, ms: float) -> float:
    return memory_mb / 1024 * ms / 1000


def _lambda_line(
    name: str, per_job: float, ms: float, memory_mb: int, prices: PriceTable, arch: str
) -> Line:
    usd = per_job * (
        prices["lambda_request"] + gb_seconds(memory_mb, ms) * prices[f"lambda_gb_second_{arch}"]
    )
    return Line(name, usd * 1e6, f"{per_job:.3g} per job x {ms:,.0f} ms @ {memory_mb} MB")


def _sqs_lines(label: str, calls: dict[str, int], jobs: int, prices: PriceTable) -> list[Line]:
    each = prices["sqs_standard_request"]
    return [
        Line(f"SQS {action} ({label})", n / jobs * each * 1e6, f"{n / jobs:.3g} per job")
        for action, n in sorted(calls.items())
        if not action.endswith("(empty)")
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
    model_ms = round(opts.model_seconds * 1000) * int(fig["model_calls_per_job"])
    s = Scenario(kind, mode)
    s.lines.append(
        Line(
            "API Gateway (HTTP API)",
            api["invocations"] / jobs * prices["api_gateway_http_request"] * 1e6,
            f"{api['invocations'] / jobs:.3g} requests per job",
        )
    )
    s.lines.append(
        _lambda_line(
            "Lambda: API function",
            api["invocations"] / jobs,
            api["billed_mean_ms"],
            opts.api_memory_mb,
            prices,
            opts.arch,
        )
    )
    worker_line = _lambda_line(
        "Lambda: worker function",
        worker["invocations"] / jobs,
        worker["billed_mean_ms"] + model_ms,
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
    log_bytes = (api["log_bytes"] + worker["log_bytes"]) / jobs
    s.lines.append(
        Line(
            "CloudWatch Logs ingestion",
            log_bytes / GB * prices["cloudwatch_logs_ingested_gb"] * 1e6,
            f"{log_bytes:,.0f} bytes per job",
        )
    )
    s.db_round_trips_per_job = (api["pg_round_trips"] + worker["pg_round_trips"]) / jobs
    return s


MODES = (
    ("single", "single"),
    ("batch", "batch of 10"),
    ("one_per_invocation", "single, 1 job per worker invocation"),
)


def scenarios(figures: dict[str, Any], opts: Options, prices: PriceTable) -> list[Scenario]:
    return [
        scenario(kind, label, fig, fig[key], opts, prices)
        for kind, fig in figures["kinds"].items()
        for key, label in MODES
        if key in fig
    ]


def fixed_lines(figures: dict[str, Any], opts: Options, prices: PriceTable) -> list[Line]:
    """What the deployment costs a month with no jobs at all."""
    idle = figures["sweeper_idle"]
    n = idle["invocations"] or 1
    sweep_sqs = sum(idle["sqs"]["calls"].values()) / n
    polls = PRIORITY_QUEUES * opts.esm_pollers * 3600 / opts.long_poll_seconds * HOURS_PER_MONTH
    sweeper = SWEEPS_PER_MONTH * (
        prices["lambda_request"]
        + gb_seconds(opts.sweeper_memory_mb, idle["billed_mean_ms"])
        * prices[f"lambda_gb_second_{opts.arch}"]
    )
    nat = HOURS_PER_MONTH * prices["nat_gateway_hour"]
    return [
        Line(
            "RDS instance",
            HOURS_PER_MONTH * prices["rds_instance_hour"],
            f"{TERRAFORM_DEFAULTS['db_instance_class']}, Single-AZ, {HOURS_PER_MONTH} h",
        ),
        Line(
            "RDS storage",
            opts.db_storage_gb * prices["rds_gp3_gb_month"],
            f"{opts.db_storage_gb} GB gp3",
        ),
        Line(
            "VPC interface endpoints",
            INTERFACE_ENDPOINTS
            * AVAILABILITY_ZONES
            * HOURS_PER_MONTH
            * prices["vpc_interface_endpoint_hour"],
            f"sqs + secretsmanager in {AVAILABILITY_ZONES} AZs",
        ),
        Line(
            "Secrets Manager",
            prices["secrets_manager_secret_month"],
            "the RDS-managed master password",
        ),
        Line(
            "NAT gateway",
            nat if opts.nat_gateway else 0.0,
            "deployed (enable_nat_gateway)"
            if opts.nat_gateway
            else f"not deployed by default (with it: ${nat:,.2f} + data)",
        ),
        Line(
            "Sweeper: Lambda",
            sweeper,
            f"{SWEEPS_PER_MONTH:,} idle passes x {idle['billed_mean_ms']:,.0f} ms @ {opts.sweeper_memory_mb} MB",
        ),
        Line(
            "Sweeper: EventBridge Scheduler",
            SWEEPS_PER_MONTH * prices["eventbridge_scheduler_invocation"],
            "rate(1 minute)",
        ),
        Line(
            "Sweeper: SQS",
            SWEEPS_PER_MONTH * sweep_sqs * prices["sqs_standard_request"],
            f"{sweep_sqs:.3g} requests per pass",
        ),
        Line(
            "Sweeper: CloudWatch Logs",
            SWEEPS_PER_MONTH * idle["log_bytes"] / n / GB * prices["cloudwatch_logs_ingested_gb"],
            f"{idle['log_bytes'] / n:,.0f} bytes per pass",
        ),
        Line(
            "SQS: idle long polling",
            polls * prices["sqs_standard_request"],
            f"{PRIORITY_QUEUES} mappings x {opts.esm_pollers} pollers x one {opts.long_poll_seconds} s poll",
        ),
    ]


def durable(kind: str, fig: dict[str, Any], opts: Options, prices: PriceTable) -> Scenario:
    """The same job as a Lambda durable function: one execution per job, one step per
    effect (at least one), started by a direct Invoke; its own work timed as tasklease's
    worker for one job per invocation, plus the model's wait; no replays (no waits)."""
    one = fig["one_per_invocation"]["worker"]
    steps = max(1, int(fig["effects_per_job"]))
    ops = 1 + steps
    ms = one["billed_mean_ms"] + round(opts.model_seconds * 1000) * int(fig["model_calls_per_job"])
    written = fig["payload_bytes"] + fig["effect_results_bytes"] + fig["result_bytes"]
    retained_gb_month = written / GB * opts.durable_retention_days * 24 / HOURS_PER_MONTH
    s = Scenario(kind, "durable function")
    s.lines = [
        _lambda_line("Lambda: durable function", 1.0, ms, opts.worker_memory_mb, prices, opts.arch),
        Line(
            "Durable operations",
            ops * prices["durable_operation"] * 1e6,
            f"1 start + {steps} step(s)",
        ),
        Line(
            "Durable data written",
            written / GB * prices["durable_data_written_gb"] * 1e6,
            f"{written:,.0f} bytes per job",
        ),
        Line(
            "Durable data retained",
            retained_gb_month * prices["durable_data_retained_gb_month"] * 1e6,
            f"{opts.durable_retention_days} days",
        ),
    ]
    return s


def break_even(tasklease: float, durable_total: float, fixed: float) -> float | None:
    """Jobs a month above which tasklease (fixed + per job) costs less than durable
    functions (per job only); None when it never does."""
    saving = (durable_total - tasklease) / 1e6
    return fixed / saving if saving > 0 else None


def price(figures: dict[str, Any], prices: PriceTable, opts: Options) -> dict[str, Any]:
    """The whole report, as ``tasklease cost --json`` prints it."""
    runs = scenarios(figures, opts, prices)
    fixed = fixed_lines(figures, opts, prices)
    fixed_total = sum(line.usd for line in fixed)
    comparisons = []
    for kind, fig in figures["kinds"].items():
        d = durable(kind, fig, opts, prices)
        tasklease = {
            s.mode: {
                "usd_per_million": round(s.total, 4),
                "break_even_jobs_per_month": _rounded(break_even(s.total, d.total, fixed_total)),
            }
            for s in runs
            if s.kind == kind
        }
        comparisons.append({"kind": kind, "durable": _scenario_doc(d), "tasklease": tasklease})
    doc = {
        "options": opts.__dict__,
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
        },
        "durable_functions": comparisons,
        "assumptions": assumptions(opts),
    }
    _check_finite(doc, "report")
    return doc


def _check_finite(v: Any, where: str) -> None:
    """Prices far out of range (a tiny ``per``, a huge ``usd``) overflow to infinity,
    which JSON cannot carry: refused, naming the first figure it reached."""
    if isinstance(v, float) and not math.isfinite(v):
        raise errors.ConfigError(
            f"{where}: the prices give {v} (check the price file's usd and per values)"
        )
    if isinstance(v, dict):
        name = v.get("name")
        for k, x in v.items():
            _check_finite(x, f"{where}.{name}" if isinstance(name, str) else f"{where}.{k}")
    elif isinstance(v, list):
        for i, x in enumerate(v):
            _check_finite(x, f"{where}[{i}]")


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
    return [
        f"model latency {opts.model_seconds:g} s per model call, billed as worker (and durable "
        "function) duration; the jobs of one worker batch wait for their models at once; "
        "model tokens are not counted (the same on every platform)",
        "each invocation's measured handler time, rounded up to 1 ms; measured in-process "
        "against local servers (loopback SQS and PostgreSQL): AWS's network adds to it",
        "cold starts (billed INIT) are not counted: per execution environment, not per job",
        f"event source mapping: one ReceiveMessage and one DeleteMessageBatch per worker "
        f"invocation; idle: {opts.esm_pollers} pollers per mapping, {opts.long_poll_seconds} s "
        "long polls, on each of the 3 priority queues",
        "the RDS instance is a fixed monthly line: database round trips per job are shown, "
        "not priced; they decide how many jobs a second the instance takes, not the bill",
        "free tier ignored; no savings plans; SQS messages under 64 KB (one request each)",
        "not counted: X-Ray traces (tracing is Active), CloudWatch custom metrics from the "
        "EMF lines, RDS Performance Insights and Enhanced Monitoring, backups beyond the "
        "free allowance, interface endpoint data processing, data transfer",
        "durable function: one execution per job started by a direct Invoke (no API "
        "Gateway), one step per effect (at least one), no waits so no replays; its own "
        "work taken as tasklease's worker time for one job per invocation",
    ]
