"""The same jobs as Lambda durable functions, at their published prices, and the monthly
volume above which tasklease (fixed lines + per job) costs less."""

from __future__ import annotations

from typing import Any

from app.cli.cost_base import (
    GB,
    HOURS_PER_MONTH,
    LAMBDA_MAX_SECONDS,
    PLATFORM_LOG_BYTES,
    Line,
    Options,
    Scenario,
    check_invocation,
    lambda_line,
    logs_line,
    xray_line,
)
from app.cli.cost_prices import PriceTable


def durable(kind: str, fig: dict[str, Any], opts: Options, prices: PriceTable) -> Scenario:
    """The same job as a Lambda durable function: one execution per job, one step per
    effect (at least one), started by a direct Invoke; its own work, and its own log
    lines, taken as tasklease's worker's for one job per invocation, plus the model's
    wait and Lambda's own log lines; traced like tasklease's functions; no replays."""
    one = fig["one_per_invocation"]
    steps = max(1, int(fig["effects_per_job"]))
    ops = 1 + steps
    ms = check_invocation(
        f"kinds.{kind}: the durable function's invocation",
        one["worker"]["billed_mean_ms"],
        fig,
        opts,
        (LAMBDA_MAX_SECONDS, "Lambda's longest invocation"),
    )
    written = fig["payload_bytes"] + fig["effect_results_bytes"] + fig["result_bytes"]
    retained_gb_month = written / GB * opts.durable_retention_days * 24 / HOURS_PER_MONTH
    own_logs = one["worker"]["log_bytes"] / one["jobs"]
    s = Scenario(kind, "durable function")
    s.lines = [
        lambda_line("Lambda: durable function", 1.0, ms, opts.worker_memory_mb, prices, opts.arch),
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
        logs_line(
            "CloudWatch Logs",
            own_logs + PLATFORM_LOG_BYTES,
            prices,
            f" (the worker's {own_logs:,.0f} + Lambda's own {PLATFORM_LOG_BYTES})",
        ),
        xray_line(1.0, opts, prices),
    ]
    return s


def break_even(tasklease: float, durable_total: float, fixed: float) -> float | None:
    """Jobs a month above which tasklease (fixed + per job) costs less than durable
    functions (per job only); None when it never does."""
    saving = (durable_total - tasklease) / 1e6
    return fixed / saving if saving > 0 else None
