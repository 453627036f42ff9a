"""The same jobs as Lambda durable functions, at their published prices, and the monthly
volume above which tasklease (fixed lines + per job) costs less."""

from __future__ import annotations

from typing import Any

from app.cost.base import (
    GB,
    HOURS_PER_MONTH,
    LAMBDA_MAX_SECONDS,
    PLATFORM_LOG_BYTES,
    XRAY_LINE,
    Line,
    Options,
    Scenario,
    check_invocation,
    default_rule_share,
    lambda_line,
    logs_line,
    xray_line,
)
from app.cost.prices import PriceTable

Shares = dict[str, float]  # the X-Ray share recorded, by function


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
    s.invocations_per_job = {"durable": 1.0}
    return s


def break_even(tasklease: float, durable_total: float, fixed: float) -> float | None:
    """Jobs a month above which tasklease (fixed + per job) costs less than durable
    functions (per job only); None when it never does."""
    saving = (durable_total - tasklease) / 1e6
    return fixed / saving if saving > 0 else None


def at_rate(s: Scenario, jobs_per_second: float, prices: PriceTable) -> tuple[float, Shares]:
    """``s`` per million jobs with X-Ray at the default rule's share for each function at
    ``jobs_per_second`` (instead of the share the tables were priced at), and the shares."""
    shares = {f: default_rule_share(jobs_per_second * n) for f, n in s.invocations_per_job.items()}
    traces = sum(n * shares[f] for f, n in s.invocations_per_job.items())
    xray = traces * prices["xray_trace_recorded"] * 1e6
    return s.total - s.usd(XRAY_LINE) + xray, shares


SECONDS_PER_MONTH = HOURS_PER_MONTH * 3600
# Volumes searched for the break-even: a grid of 1e3 to 1e12 jobs a month (~0.4 M a
# second), 20 points a decade, then bisection between the last two points.
GRID = [10 ** (3 + k / 20) for k in range(9 * 20 + 1)]


def break_even_sampled(
    tasklease: Scenario, durable_fn: Scenario, fixed: float, prices: PriceTable
) -> tuple[float | None, Shares]:
    """The break-even with X-Ray's default rule at the rate of the break-even itself: the
    smallest monthly volume where tasklease (fixed + per job) costs no more than durable
    functions, each priced with the shares the rule records at that volume's rate (a fixed
    point of volume -> rate -> share -> volume, found by a grid then bisection). None and
    no shares when tasklease is not cheaper below 1e12 jobs a month."""

    def over(v: float) -> float:  # tasklease's bill less durable's, for v jobs a month
        rate = v / SECONDS_PER_MONTH
        t, d = at_rate(tasklease, rate, prices)[0], at_rate(durable_fn, rate, prices)[0]
        return fixed + v * (t - d) / 1e6

    lo = 0.0
    for hi in GRID:
        if over(hi) < 0:
            break
        lo = hi
    else:
        return None, {}
    for _ in range(100):
        mid = (lo + hi) / 2
        lo, hi = (lo, mid) if over(mid) < 0 else (mid, hi)
    rate = hi / SECONDS_PER_MONTH
    shares = at_rate(tasklease, rate, prices)[1] | at_rate(durable_fn, rate, prices)[1]
    return hi, shares
