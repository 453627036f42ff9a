"""What the parts of `tasklease cost` share: the deployment's defaults, the options, a
priced line, and the lines every Lambda invocation brings (requests and GB-seconds, the
platform's own log lines, an X-Ray trace)."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import Any

from app import errors
from app.cost.prices import PriceTable
from app.cost.profiles import DEFAULT_PROFILE, Profile, profile
from app.settings.shared import SHARED

HOURS_PER_MONTH = 730  # AWS's own convention on its pricing pages
GB = 1024**3

# infra/variables.tf's defaults (tests/infra/test_cost_defaults.py fails on drift); the
# worker's memory and the database's Multi-AZ are the profile's (app/cost/profiles.py).
TERRAFORM_DEFAULTS: dict[str, Any] = {
    "deployment_profile": DEFAULT_PROFILE,
    "lambda_architecture": "arm64",
    "api_memory_mb": 512,
    "worker_memory_mb": None,
    "sweeper_memory_mb": 256,
    "db_instance_class": "db.t4g.micro",
    "db_allocated_storage_gb": 20,
    "db_multi_az": None,
    "enable_nat_gateway": False,
    "sweeper_schedule_expression": "rate(1 minute)",
    "log_retention_days": 365,
}
# infra/network.tf's VPC flow log: rejected traffic only, to a CloudWatch Logs group.
FLOW_LOG_TRAFFIC = "REJECT"
# infra/network.tf: interface endpoints for sqs and secretsmanager (production
# profile), in each of the two default availability zones; with enable_nat_gateway, a
# NAT gateway and its Elastic IP (per zone in production, one in small); infra/locals.tf: one source queue (and event source mapping) per priority;
# infra/monitoring.tf: two alarms per priority.
INTERFACE_ENDPOINTS = 2
AVAILABILITY_ZONES = 2
PRIORITY_QUEUES = 3
ALARMS = 2 * PRIORITY_QUEUES
# The worker function's timeout (app/settings/shared_settings.json, which infra/locals.tf reads):
# a model wait longer than that times the worker out rather than billing it.
WORKER_TIMEOUT_SECONDS = int(SHARED["worker_timeout_seconds"])
# Lambda's longest invocation (a durable function's each invocation included).
LAMBDA_MAX_SECONDS = 900

# Estimates, not measurements: the lines Lambda itself writes per invocation (log_format
# Text, tracing Active: START, END, REPORT with its XRAY line), and API Gateway's access
# log line per request (infra/apigateway.tf's format, typical values).
_REQUEST_ID = "6f1c2a4e-8d2b-4b1e-9a51-3c0d1f2e4a5b"
PLATFORM_LOG_SAMPLE = (
    f"START RequestId: {_REQUEST_ID} Version: $LATEST\n"
    f"END RequestId: {_REQUEST_ID}\n"
    f"REPORT RequestId: {_REQUEST_ID}\tDuration: 21.53 ms\tBilled Duration: 22 ms\t"
    "Memory Size: 1024 MB\tMax Memory Used: 118 MB\t\n"
    "XRAY TraceId: 1-6751e0a5-3f0c2b1a9d8e7f6a5b4c3d2e\tSegmentId: 4a3b2c1d0e9f8a7b\t"
    "Sampled: true\t\n"
)
PLATFORM_LOG_BYTES = len(PLATFORM_LOG_SAMPLE.encode())
ACCESS_LOG_SAMPLE: dict[str, str] = {
    "requestId": "KxY1zg7ZoAMEJbQ=",
    "ip": "203.0.113.7",
    "requestTime": "05/Dec/2026:00:20:13 +0000",
    "httpMethod": "POST",
    "path": "/v1/jobs",
    "status": "202",
    "responseLength": "141",
    "integrationError": "-",
    "integrationLatency": "23",
}
ACCESS_LOG_BYTES = len(json.dumps(ACCESS_LOG_SAMPLE, separators=(",", ":")).encode()) + 1


@dataclass(frozen=True)
class Options:
    profile: str = DEFAULT_PROFILE
    arch: str = TERRAFORM_DEFAULTS["lambda_architecture"]
    api_memory_mb: int = TERRAFORM_DEFAULTS["api_memory_mb"]
    # None: the profile's (Terraform's worker_memory_mb left at null); an int once built.
    worker_memory_mb: int = None  # type: ignore[assignment]
    sweeper_memory_mb: int = TERRAFORM_DEFAULTS["sweeper_memory_mb"]
    model_seconds: float = 2.0  # per model call, billed while the worker waits for it
    esm_pollers: int = 5  # per event source mapping while the queue is empty
    long_poll_seconds: int = 20
    durable_retention_days: int = 14  # durable functions' default RetentionPeriodInDays
    db_storage_gb: int = TERRAFORM_DEFAULTS["db_allocated_storage_gb"]
    # None: deployed when the model has a latency (a real provider needs the way out).
    nat_gateway: bool | None = None
    # The share of invocations X-Ray records, or None: the profile's tracing mode's.
    # Active: the default rule's, which takes every one below a second's worth (the
    # per-million tables) and, at the break-even, the share at the rate there
    # (default_rule_share); PassThrough: none (nothing upstream of the functions sends a
    # sampled trace header: API Gateway HTTP APIs and EventBridge Scheduler do not trace).
    xray_sampled: float | None = None

    def __post_init__(self) -> None:
        p = profile(self.profile)
        if self.worker_memory_mb is None:
            object.__setattr__(self, "worker_memory_mb", p.worker_memory_mb)
        if self.xray_sampled is None and p.tracing_mode == "PassThrough":
            object.__setattr__(self, "xray_sampled", 0.0)
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
        if self.xray_sampled is not None and not 0 <= self.xray_sampled <= 1:
            raise errors.ConfigError(f"xray_sampled: 0 to 1, got {self.xray_sampled}")
        if not 20 <= self.db_storage_gb <= 65536:
            raise errors.ConfigError(
                f"db_storage_gb: RDS gp3 takes 20 to 65536 GB, got {self.db_storage_gb}"
            )

    @property
    def shape(self) -> Profile:
        return profile(self.profile)

    @property
    def traced(self) -> float:
        """The share the per-million tables trace: as given, or every invocation."""
        return 1.0 if self.xray_sampled is None else self.xray_sampled

    @property
    def with_nat(self) -> bool:
        # A real model (a latency) needs a way out: over IPv6 where the profile has one,
        # else through a NAT gateway.
        if self.nat_gateway is None:
            return self.model_seconds > 0 and not self.shape.ipv6_egress
        return self.nat_gateway


@dataclass
class Line:
    name: str
    usd: float  # per million jobs, or per month for a fixed line
    detail: str = ""


XRAY_LINE = "X-Ray traces recorded"


@dataclass
class Scenario:
    kind: str
    mode: str
    lines: list[Line] = field(default_factory=list)
    db_round_trips_per_job: float = 0.0
    # Each traced function's invocations per job, for X-Ray's share at a rate.
    invocations_per_job: dict[str, float] = field(default_factory=dict)

    @property
    def total(self) -> float:
        return sum(line.usd for line in self.lines)

    def usd(self, name: str) -> float:
        return sum(line.usd for line in self.lines if line.name == name)


def gb_seconds(memory_mb: int, ms: float) -> float:
    return memory_mb / 1024 * ms / 1000


def lambda_line(
    name: str, per_job: float, ms: float, memory_mb: int, prices: PriceTable, arch: str
) -> Line:
    usd = per_job * (
        prices["lambda_request"] + gb_seconds(memory_mb, ms) * prices[f"lambda_gb_second_{arch}"]
    )
    return Line(name, usd * 1e6, f"{per_job:.3g} per job x {ms:,.0f} ms @ {memory_mb} MB")


def logs_line(name: str, bytes_per_job: float, prices: PriceTable, what: str) -> Line:
    usd = bytes_per_job / GB * prices["cloudwatch_logs_ingested_gb"] * 1e6
    return Line(name, usd, f"{bytes_per_job:,.0f} bytes per job{what}")


def xray_line(invocations_per_job: float, opts: Options, prices: PriceTable) -> Line:
    traces = invocations_per_job * opts.traced
    return Line(
        XRAY_LINE,
        traces * prices["xray_trace_recorded"] * 1e6,
        f"{traces:.3g} per job ({opts.traced:.0%} of invocations traced)",
    )


# X-Ray's default sampling rule: a reservoir of one request a second, then 5% of the rest
# (https://docs.aws.amazon.com/xray/latest/devguide/xray-console-sampling.html).
XRAY_RESERVOIR_PER_SECOND = 1.0
XRAY_FIXED_RATE = 0.05


def default_rule_share(per_second: float) -> float:
    """The share of ``per_second`` invocations of one function the default rule records:
    min(1, (1 + 0.05 (r - 1)) / r). Simplified: the reservoir taken per function,
    invocations spread evenly over each second (no bursts)."""
    if per_second <= XRAY_RESERVOIR_PER_SECOND:
        return 1.0
    rest = per_second - XRAY_RESERVOIR_PER_SECOND
    return (XRAY_RESERVOIR_PER_SECOND + XRAY_FIXED_RATE * rest) / per_second


def model_wait_ms(fig: dict[str, Any], opts: Options) -> int:
    """One job's wait for its model calls, in whole milliseconds."""
    return round(opts.model_seconds * 1000) * int(fig["model_calls_per_job"])


def check_invocation(
    what: str, measured_ms: float, fig: dict[str, Any], opts: Options, limit: tuple[int, str]
) -> float:
    """An invocation's billed ms (measured + the model's wait), refused above ``limit``
    (seconds, whose): a call that long times out rather than being billed."""
    ms = measured_ms + model_wait_ms(fig, opts)
    seconds, whose = limit
    if ms > seconds * 1000:
        raise errors.ConfigError(
            f"{what} would take {ms / 1000:,.1f} s ({measured_ms:,.0f} ms measured + "
            f"{fig['model_calls_per_job']} model call(s) x {opts.model_seconds:g} s): above "
            f"{whose} of {seconds} s; lower --model-seconds"
        )
    return ms


def check_finite(v: Any, where: str) -> None:
    """Prices far out of range (a tiny ``per``, a huge ``usd``) overflow to infinity,
    which JSON cannot carry: refused, naming the first figure it reached."""
    if isinstance(v, float) and not math.isfinite(v):
        raise errors.ConfigError(
            f"{where}: the prices give {v} (check the price file's usd and per values)"
        )
    if isinstance(v, dict):
        name = v.get("name")
        for k, x in v.items():
            check_finite(x, f"{where}.{name}" if isinstance(name, str) else f"{where}.{k}")
    elif isinstance(v, list):
        for i, x in enumerate(v):
            check_finite(x, f"{where}[{i}]")
