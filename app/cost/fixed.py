"""The fixed monthly lines of `tasklease cost`: what the default deployment costs with no
jobs at all (the database, the endpoints, the secret, the NAT gateway a real model needs,
the idle sweeper, the event source mappings' empty polls, the custom metrics and alarms)."""

from __future__ import annotations

import re
from typing import Any

from app import errors
from app.cost.base import (
    ALARMS,
    AVAILABILITY_ZONES,
    GB,
    HOURS_PER_MONTH,
    INTERFACE_ENDPOINTS,
    PLATFORM_LOG_BYTES,
    PRIORITY_QUEUES,
    TERRAFORM_DEFAULTS,
    Line,
    Options,
    gb_seconds,
)
from app.cost.prices import PriceTable
from app.cost.profiles import custom_metrics

_SECONDS = {"minute": 60, "hour": 3600, "day": 86400}


def runs_per_month(expression: str) -> float:
    """How often an EventBridge Scheduler ``rate(...)`` expression fires in a month."""
    m = re.fullmatch(r"rate\((\d+) (minute|hour|day)s?\)", expression.strip())
    if m is None or int(m.group(1)) == 0:
        raise errors.ConfigError(
            f"sweeper_schedule_expression: rate(N minutes|hours|days) expected, got {expression!r}"
        )
    return HOURS_PER_MONTH * 3600 / (int(m.group(1)) * _SECONDS[m.group(2)])


SCHEDULE = str(TERRAFORM_DEFAULTS["sweeper_schedule_expression"])
SWEEPS_PER_MONTH = runs_per_month(SCHEDULE)


def billed_requests(calls: dict[str, int]) -> int:
    """SQS requests made: bench/proxy.py counts an empty receive twice, under
    ReceiveMessage and ReceiveMessage(empty); the second is a label, not a request."""
    return sum(n for action, n in calls.items() if not action.endswith("(empty)"))


def nat_lines(opts: Options, prices: PriceTable) -> list[Line]:
    shape = opts.shape
    gateways = AVAILABILITY_ZONES if shape.nat_gateway_per_az else 1
    nat = gateways * HOURS_PER_MONTH * prices["nat_gateway_hour"]
    ip = gateways * HOURS_PER_MONTH * prices["public_ipv4_address_hour"]
    where = f"{gateways} gateway(s), one per AZ" if gateways > 1 else "1 gateway"
    if opts.with_nat:
        why = (
            "enable_nat_gateway: a real model provider or webhook needs it"
            if opts.nat_gateway is None
            else "enable_nat_gateway (--nat-gateway)"
        )
        if shape.ipv6_egress:
            why = "enable_nat_gateway (--nat-gateway): for an IPv4-only provider or webhook"
        return [
            Line("NAT gateway", nat, f"{where}, {HOURS_PER_MONTH} h; {why}; + $/GB processed"),
            Line("NAT gateway: Elastic IP", ip, f"{gateways} public IPv4 address(es)"),
        ]
    if shape.ipv6_egress:
        return [
            Line(
                "Egress-only internet gateway (IPv6)",
                HOURS_PER_MONTH * prices["egress_only_internet_gateway_hour"],
                "no hourly charge: SQS, Secrets Manager and an IPv6 model provider or "
                f"webhook over IPv6 (an IPv4-only one needs --nat-gateway: +${nat + ip:,.2f})",
            )
        ]
    return [
        Line(
            "NAT gateway",
            0.0,
            f"not deployed (fake model, no webhook); a real model needs it: +${nat + ip:,.2f}",
        )
    ]


def _sweeper_lines(figures: dict[str, Any], opts: Options, prices: PriceTable) -> list[Line]:
    idle = figures["sweeper_idle"]
    n = idle["invocations"]
    sweep_sqs = billed_requests(idle["sqs"]["calls"]) / n
    log_bytes = idle["log_bytes"] / n + PLATFORM_LOG_BYTES
    sweeper = SWEEPS_PER_MONTH * (
        prices["lambda_request"]
        + gb_seconds(opts.sweeper_memory_mb, idle["billed_mean_ms"])
        * prices[f"lambda_gb_second_{opts.arch}"]
    )
    passes = f"{SWEEPS_PER_MONTH:,.0f} idle passes"
    return [
        Line(
            "Sweeper: Lambda",
            sweeper,
            f"{passes} x {idle['billed_mean_ms']:,.0f} ms @ {opts.sweeper_memory_mb} MB",
        ),
        Line(
            "Sweeper: EventBridge Scheduler",
            SWEEPS_PER_MONTH * prices["eventbridge_scheduler_invocation"],
            SCHEDULE,
        ),
        Line(
            "Sweeper: SQS",
            SWEEPS_PER_MONTH * sweep_sqs * prices["sqs_standard_request"],
            f"{sweep_sqs:.3g} requests per pass",
        ),
        Line(
            "Sweeper: CloudWatch Logs",
            SWEEPS_PER_MONTH * log_bytes / GB * prices["cloudwatch_logs_ingested_gb"],
            f"{log_bytes:,.0f} bytes per pass (incl. {PLATFORM_LOG_BYTES} of Lambda's own)",
        ),
        Line(
            "Sweeper: X-Ray traces",
            SWEEPS_PER_MONTH * prices["xray_trace_recorded"] * _sweeper_traced(opts),
            "every pass traced (one a minute: within the 1 a second the default rule takes)"
            if _sweeper_traced(opts)
            else "none traced (PassThrough: the scheduler sends no sampled trace header)",
        ),
    ]


def _sweeper_traced(opts: Options) -> float:
    """Active: every pass (one a minute, within the rule's one a second); PassThrough:
    none (EventBridge Scheduler sends no sampled trace header)."""
    return 0.0 if opts.shape.tracing_mode == "PassThrough" else 1.0


def _db_lines(opts: Options, prices: PriceTable) -> list[Line]:
    multi = opts.shape.db_multi_az
    suffix = "_multi_az" if multi else ""
    return [
        Line(
            "RDS instance",
            HOURS_PER_MONTH * prices[f"rds_instance_hour{suffix}"],
            f"{TERRAFORM_DEFAULTS['db_instance_class']}, "
            f"{'Multi-AZ' if multi else 'Single-AZ'}, {HOURS_PER_MONTH} h",
        ),
        Line(
            "RDS storage",
            opts.db_storage_gb * prices[f"rds_gp3_gb_month{suffix}"],
            f"{opts.db_storage_gb} GB gp3{', Multi-AZ' if multi else ''}",
        ),
    ]


def _endpoint_line(opts: Options, prices: PriceTable) -> Line:
    if not opts.shape.interface_endpoints:
        return Line(
            "VPC interface endpoints",
            0.0,
            "none: SQS and Secrets Manager over IPv6 (their dual-stack public endpoints)",
        )
    return Line(
        "VPC interface endpoints",
        INTERFACE_ENDPOINTS
        * AVAILABILITY_ZONES
        * HOURS_PER_MONTH
        * prices["vpc_interface_endpoint_hour"],
        f"sqs + secretsmanager in {AVAILABILITY_ZONES} AZs",
    )


def fixed_lines(figures: dict[str, Any], opts: Options, prices: PriceTable) -> list[Line]:
    """What the deployment costs a month with no jobs at all."""
    polls = PRIORITY_QUEUES * opts.esm_pollers * 3600 / opts.long_poll_seconds * HOURS_PER_MONTH
    measured = figures["emf_metrics"]
    metrics = len(custom_metrics(measured, opts.shape))
    policy = (
        "every metric under every label (failures, retries and other kinds add more)"
        if opts.shape.emf_metrics is None
        else f"{len(opts.shape.emf_metrics)} metrics kept, dimensions "
        f"{', '.join(opts.shape.emf_dimensions or ()) or 'none'} (TASKLEASE_EMF_*): at most "
        "one per kept metric and outcome"
    )
    return [
        *_db_lines(opts, prices),
        _endpoint_line(opts, prices),
        Line(
            "Secrets Manager",
            prices["secrets_manager_secret_month"],
            "the RDS-managed master password",
        ),
        *nat_lines(opts, prices),
        *_sweeper_lines(figures, opts, prices),
        Line(
            "SQS: idle long polling",
            polls * prices["sqs_standard_request"],
            f"{PRIORITY_QUEUES} mappings x {opts.esm_pollers} pollers x one {opts.long_poll_seconds} s poll",
        ),
        Line(
            "CloudWatch custom metrics",
            metrics * prices["cloudwatch_custom_metric_month"],
            f"{metrics} metric+dimension combinations of the measured run's {len(measured)} "
            f"EMF ones; {policy}",
        ),
        Line(
            "CloudWatch alarms",
            ALARMS * prices["cloudwatch_alarm_month"],
            f"{ALARMS} standard alarms (infra/monitoring.tf: DLQ depth, oldest message, "
            f"per priority)",
        ),
    ]
