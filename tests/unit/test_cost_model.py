"""`tasklease cost`'s arithmetic on hand-made figures and round prices: every line is the
hand computation written out, so a change in the model fails here, naming the line."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from app import errors
from app.cost import base as cb
from app.cost import durable as cd
from app.cost import fixed as cf
from app.cost import model as cm
from app.cost.prices import REQUIRED_PRICES, PriceTable, load_prices, parse_prices

pytestmark = pytest.mark.unit

GB = 1024**3
MONTH_H = 730

ROUND_PRICES = {
    "lambda_request": (1.0, 1_000_000),  # $1 per million
    "lambda_gb_second_x86_64": (0.00002, 1),
    "lambda_gb_second_arm64": (0.00001, 1),
    "api_gateway_http_request": (1.0, 1_000_000),
    "sqs_standard_request": (0.5, 1_000_000),
    "eventbridge_scheduler_invocation": (1.0, 1_000_000),
    "cloudwatch_logs_ingested_gb": (1.0, 1),
    "rds_instance_hour": (0.02, 1),
    "rds_gp3_gb_month": (0.1, 1),
    "rds_instance_hour_multi_az": (0.04, 1),
    "rds_gp3_gb_month_multi_az": (0.2, 1),
    # Free on AWS; a price here so that a line not read from the table shows.
    "egress_only_internet_gateway_hour": (0.001, 1),
    "vpc_interface_endpoint_hour": (0.01, 1),
    "nat_gateway_hour": (0.05, 1),
    "public_ipv4_address_hour": (0.01, 1),
    "xray_trace_recorded": (5.0, 1_000_000),
    "cloudwatch_custom_metric_month": (0.3, 1),
    "cloudwatch_alarm_month": (0.1, 1),
    "secrets_manager_secret_month": (0.4, 1),
    "durable_operation": (8.0, 1_000_000),
    "durable_data_written_gb": (0.25, 1),
    "durable_data_retained_gb_month": (0.15, 1),
}


def price_doc() -> dict[str, Any]:
    return {
        "region": "us-east-1",
        "date": "2026-12-05",
        "currency": "USD",
        "prices": {
            k: {"usd": usd, "per": per, "unit": "u", "source": "https://example.com/"}
            for k, (usd, per) in ROUND_PRICES.items()
        },
    }


def prices() -> PriceTable:
    return parse_prices(price_doc(), "test")


def run(
    api_inv: int, api_ms: float, worker_inv: int, worker_ms: float, jobs: int = 10
) -> dict[str, Any]:
    return {
        "jobs": jobs,
        "api": {
            "invocations": api_inv,
            "billed_mean_ms": api_ms,
            "sqs": {"calls": {"SendMessageBatch": api_inv}},
            "pg_round_trips": 20,
            "log_bytes": 10_000,
        },
        "worker": {
            "invocations": worker_inv,
            "billed_mean_ms": worker_ms,
            "sqs": {"calls": {"SendMessage": 2}},
            "pg_round_trips": 7,
            "log_bytes": 5_000,
            "event_source": {
                "ReceiveMessage": worker_inv,
                "DeleteMessageBatch": worker_inv,
                "records": jobs,
            },
        },
    }


FIGURES: dict[str, Any] = {
    "figures_version": 2,
    "measured_at": "2026-12-05T00:44:06+00:00",
    "emf_metrics": ["tasklease/a[kind=k]", "tasklease/a[kind=j]", "tasklease/b[]"],
    "kinds": {
        "k": {
            "model_calls_per_job": 1,
            "effects_per_job": 2,
            "payload_bytes": 100,
            "result_bytes": 200,
            "effect_results_bytes": 300,
            "single": run(10, 10, 1, 50),
            "batch": run(1, 30, 1, 50),
            "one_per_invocation": run(1, 10, 1, 20, jobs=1),
            "worker_memory": {"jobs": 10, "peak_rss_mb": 90.0},
        }
    },
    "sweeper_idle": {
        "invocations": 2,
        "billed_mean_ms": 20,
        # an empty receive is counted twice by bench/proxy.py: 1 request, not 2
        "sqs": {
            "calls": {"GetQueueAttributes": 4, "ReceiveMessage": 2, "ReceiveMessage(empty)": 2}
        },
        "pg_round_trips": 10,
        "log_bytes": 1_000,
    },
}
OPTS = cb.Options(
    arch="arm64",
    api_memory_mb=1024,
    worker_memory_mb=2048,
    sweeper_memory_mb=256,
    model_seconds=1.0,
)


def lines(s: cm.Scenario) -> dict[str, float]:
    return {line.name: line.usd for line in s.lines}


def test_a_single_submission_is_priced_line_by_line() -> None:
    fig = FIGURES["kinds"]["k"]
    s = cm.scenario("k", "single", fig, fig["single"], OPTS, prices())
    got = lines(s)
    # 1 request a job at $1/M
    assert got["API Gateway (HTTP API)"] == pytest.approx(1.0)
    # 1 invocation a job: $1/M requests + 1 GB x 0.010 s x $0.00001 = $0.10/M
    assert got["Lambda: API function"] == pytest.approx(1.0 + 0.1)
    # 0.1 invocation a job: (1 + 2 GB x (0.050 + 1.000 model) s x $0.00001 x 1e6) x 0.1
    assert got["Lambda: worker function"] == pytest.approx(0.1 * (1.0 + 2 * 1.05 * 10))
    assert got["SQS SendMessageBatch (code)"] == pytest.approx(0.5)
    assert got["SQS SendMessage (code)"] == pytest.approx(0.2 * 0.5)
    assert got["SQS ReceiveMessage (event source mapping)"] == pytest.approx(0.1 * 0.5)
    assert got["SQS DeleteMessageBatch (event source mapping)"] == pytest.approx(0.1 * 0.5)
    assert got["CloudWatch Logs: the functions' lines"] == pytest.approx(1500 / GB * 1.0 * 1e6)
    # 1.1 invocations a job, each with Lambda's own lines; 1 access log line a request
    platform = 1.1 * cb.PLATFORM_LOG_BYTES
    assert got["CloudWatch Logs: Lambda's own lines"] == pytest.approx(platform / GB * 1e6)
    assert got["CloudWatch Logs: API access log"] == pytest.approx(cb.ACCESS_LOG_BYTES / GB * 1e6)
    # every one of the 1.1 invocations traced, $5/M
    assert got["X-Ray traces recorded"] == pytest.approx(1.1 * 5.0)
    assert s.total == pytest.approx(sum(got.values()))
    assert s.db_round_trips_per_job == pytest.approx(2.7)


def test_the_model_wait_is_billed_once_per_worker_invocation_and_follows_the_flag() -> None:
    fig = FIGURES["kinds"]["k"]
    no_wait = cb.Options(**{**OPTS.__dict__, "model_seconds": 0.0})
    worker = lines(cm.scenario("k", "single", fig, fig["single"], no_wait, prices()))
    assert worker["Lambda: worker function"] == pytest.approx(0.1 * (1.0 + 2 * 0.05 * 10))


def test_x86_costs_its_own_gb_second_price() -> None:
    fig = FIGURES["kinds"]["k"]
    x86 = cb.Options(**{**OPTS.__dict__, "arch": "x86_64"})
    got = lines(cm.scenario("k", "single", fig, fig["single"], x86, prices()))
    assert got["Lambda: API function"] == pytest.approx(1.0 + 0.2)


def test_the_fixed_monthly_lines() -> None:
    no_nat = cb.Options(**{**OPTS.__dict__, "nat_gateway": False})
    got = {line.name: line.usd for line in cf.fixed_lines(FIGURES, no_nat, prices())}
    sweeps = 60 * MONTH_H
    # the default profile, production: Multi-AZ
    assert got["RDS instance"] == pytest.approx(0.04 * MONTH_H)
    assert got["RDS storage"] == pytest.approx(20 * 0.2)
    assert got["VPC interface endpoints"] == pytest.approx(2 * 2 * MONTH_H * 0.01)
    assert got["Secrets Manager"] == pytest.approx(0.4)
    assert got["NAT gateway"] == 0.0
    assert got["Sweeper: Lambda"] == pytest.approx(sweeps * (1e-6 + 0.25 * 0.020 * 0.00001))
    assert got["Sweeper: EventBridge Scheduler"] == pytest.approx(sweeps * 1e-6)
    # 4 GetQueueAttributes + 2 ReceiveMessage over 2 passes: the (empty) labels not again
    assert got["Sweeper: SQS"] == pytest.approx(sweeps * 3 * 0.5e-6)
    log_bytes = 500 + cb.PLATFORM_LOG_BYTES
    assert got["Sweeper: CloudWatch Logs"] == pytest.approx(sweeps * log_bytes / GB)
    assert got["Sweeper: X-Ray traces"] == pytest.approx(sweeps * 5e-6)
    # 3 mappings x 5 pollers x 180 polls an hour
    assert got["SQS: idle long polling"] == pytest.approx(3 * 5 * 180 * MONTH_H * 0.5e-6)
    assert got["CloudWatch custom metrics"] == pytest.approx(3 * 0.3)
    assert got["CloudWatch alarms"] == pytest.approx(6 * 0.1)


def test_the_sweeps_a_month_are_the_schedules() -> None:
    assert cf.SWEEPS_PER_MONTH == 43_800  # rate(1 minute) over 730 h
    assert cf.runs_per_month("rate(5 minutes)") == pytest.approx(8_760)
    assert cf.runs_per_month("rate(1 hour)") == pytest.approx(730)
    assert cf.runs_per_month("rate(2 days)") == pytest.approx(730 / 48)
    for bad in ("cron(0 * * * ? *)", "rate(0 minutes)", "rate(1 week)"):
        with pytest.raises(errors.ConfigError, match="sweeper_schedule_expression"):
            cf.runs_per_month(bad)


def test_a_nat_gateway_and_its_address_are_fixed_lines_when_deployed() -> None:
    with_nat = cb.Options(**{**OPTS.__dict__, "nat_gateway": True})
    got = {line.name: line.usd for line in cf.fixed_lines(FIGURES, with_nat, prices())}
    # production: one per availability zone
    assert got["NAT gateway"] == pytest.approx(2 * 0.05 * MONTH_H)
    assert got["NAT gateway: Elastic IP"] == pytest.approx(2 * 0.01 * MONTH_H)


def test_a_model_with_a_latency_brings_the_nat_gateway_unless_told_not_to() -> None:
    assert cb.Options(model_seconds=2.0).with_nat
    assert not cb.Options(model_seconds=0.0).with_nat
    assert not cb.Options(model_seconds=2.0, nat_gateway=False).with_nat
    assert cb.Options(model_seconds=0.0, nat_gateway=True).with_nat
    doc = cm.price(FIGURES, prices(), OPTS)  # model 1 s: counted
    fixed = doc["fixed_per_month"]
    nat = 2 * (0.05 * MONTH_H + 0.01 * MONTH_H)
    assert fixed["total_usd"] - fixed["total_without_nat_gateway_usd"] == pytest.approx(nat)
    assert any("enable_nat_gateway" in a for a in doc["assumptions"])


def test_the_durable_function_comparison() -> None:
    d = cd.durable("k", FIGURES["kinds"]["k"], OPTS, prices())
    got = lines(d)
    # the same log lines as tasklease's worker for one job a call, and Lambda's own
    logs = 5_000 + cb.PLATFORM_LOG_BYTES
    assert got["CloudWatch Logs"] == pytest.approx(logs / GB * 1e6)
    assert got["X-Ray traces recorded"] == pytest.approx(5.0)
    # one invocation of 20 ms + 1,000 ms model at 2 GB
    assert got["Lambda: durable function"] == pytest.approx(1.0 + 2 * 1.02 * 10)
    assert got["Durable operations"] == pytest.approx(3 * 8.0)  # start + 2 steps
    assert got["Durable data written"] == pytest.approx(600 / GB * 0.25 * 1e6)
    retained = 600 / GB * 14 * 24 / MONTH_H * 0.15 * 1e6
    assert got["Durable data retained"] == pytest.approx(retained)


def test_a_kind_without_effects_is_one_step() -> None:
    fig = copy.deepcopy(FIGURES["kinds"]["k"]) | {"effects_per_job": 0, "model_calls_per_job": 0}
    assert lines(cd.durable("k", fig, OPTS, prices()))["Durable operations"] == pytest.approx(16.0)


def test_break_even() -> None:
    assert cd.break_even(2.0, 12.0, 50.0) == pytest.approx(5_000_000)
    assert cd.break_even(12.0, 2.0, 50.0) is None


def test_the_headline_break_even_is_the_low_traffic_runs() -> None:
    doc = cm.price(FIGURES, prices(), OPTS)
    comparison = doc["durable_functions"][0]
    low = comparison["tasklease"]["submitted singly, 1 job per worker call (low traffic)"]
    assert low["headline"]
    assert comparison["break_even_jobs_per_month"] == low["break_even_jobs_per_month"]
    backlog = comparison["tasklease"]["submitted singly, backlog (worker batches of 10)"]
    assert not backlog["headline"]
    # the low-traffic run costs more per job, so its break-even volume is higher
    assert low["usd_per_million"] > backlog["usd_per_million"]
    assert low["break_even_jobs_per_month"] > backlog["break_even_jobs_per_month"]


def test_the_report_holds_every_part() -> None:
    doc = cm.price(FIGURES, prices(), OPTS)
    assert [r["mode"] for r in doc["per_million_jobs"]] == [label for _, label in cm.MODES]
    assert doc["per_million_jobs"][0]["mode"].endswith("(low traffic)")
    assert doc["fixed_per_month"]["total_usd"] > 40
    comparison = doc["durable_functions"][0]
    assert set(comparison["tasklease"]) == {label for _, label in cm.MODES}
    assert doc["prices"]["region"] == "us-east-1"
    assert any("free tier ignored" in a for a in doc["assumptions"])


@pytest.mark.parametrize("name", REQUIRED_PRICES)
def test_every_price_of_the_committed_file_is_there_with_a_source(name: str) -> None:
    table = load_prices()
    assert table.prices[name].source.startswith("https://")
    assert table[name] >= 0


def test_a_worker_call_longer_than_the_workers_timeout_is_refused() -> None:
    # one model call of 300 s is allowed alone; 100 of them a job is an 8.3 h call
    fig = copy.deepcopy(FIGURES["kinds"]["k"]) | {"model_calls_per_job": 100}
    slow = cb.Options(**{**OPTS.__dict__, "model_seconds": 300.0})
    with pytest.raises(errors.ConfigError, match="the worker function's timeout of 300 s"):
        cm.scenario("k", "single", fig, fig["single"], slow, prices())
    # the measured time counts too: 299.96 s of model + 50 ms measured
    edge = cb.Options(**{**OPTS.__dict__, "model_seconds": 299.96})
    fig["model_calls_per_job"] = 1
    with pytest.raises(errors.ConfigError, match=r"kinds\.k, single: one worker call"):
        cm.scenario("k", "single", fig, fig["single"], edge, prices())
    ok = cb.Options(**{**OPTS.__dict__, "model_seconds": 299.9})
    cm.scenario("k", "single", fig, fig["single"], ok, prices())


def test_a_durable_invocation_longer_than_lambdas_limit_is_refused() -> None:
    fig = copy.deepcopy(FIGURES["kinds"]["k"]) | {"model_calls_per_job": 4}
    slow = cb.Options(**{**OPTS.__dict__, "model_seconds": 225.0})  # 900 s + 20 ms
    with pytest.raises(errors.ConfigError, match="Lambda's longest invocation of 900 s"):
        cd.durable("k", fig, slow, prices())
    fig["model_calls_per_job"] = 3
    assert cd.durable("k", fig, slow, prices()).total > 0


def test_the_default_rules_share_at_a_rate() -> None:
    assert cb.default_rule_share(0.0) == 1.0
    assert cb.default_rule_share(0.5) == 1.0
    assert cb.default_rule_share(1.0) == 1.0
    assert cb.default_rule_share(3.0) == pytest.approx((1 + 0.05 * 2) / 3)
    assert cb.default_rule_share(1e6) == pytest.approx(0.05, rel=1e-4)


def _low_and_backlog() -> tuple[cm.Scenario, cm.Scenario, cm.Scenario, float]:
    fig = FIGURES["kinds"]["k"]
    low = cm.scenario("k", "low", fig, fig["one_per_invocation"], OPTS, prices())
    backlog = cm.scenario("k", "backlog", fig, fig["single"], OPTS, prices())
    d = cd.durable("k", fig, OPTS, prices())
    # no NAT gateways: a fixed bill low enough for a break-even below a job a second
    no_nat = cb.Options(**{**OPTS.__dict__, "nat_gateway": False})
    return low, backlog, d, sum(x.usd for x in cf.fixed_lines(FIGURES, no_nat, prices()))


def test_the_break_even_prices_xray_at_the_rate_of_the_break_even() -> None:
    low, _, d, fixed = _low_and_backlog()
    at_100 = cd.break_even(low.total, d.total, fixed)
    assert at_100 is not None and at_100 / (MONTH_H * 3600) > 1  # every trace: not so
    jobs, shares = cd.break_even_sampled(low, d, fixed, prices())
    assert jobs is not None
    rate = jobs / (MONTH_H * 3600)
    share = min(1.0, (1 + 0.05 * (rate - 1)) / rate)
    assert rate > 1 and share < 1
    assert shares == pytest.approx({"API": share, "worker": share, "durable": share})
    # at that volume, with that share, the two bills are equal: 2 traces a job against 1
    t = low.total - 2 * 5.0 + 2 * 5.0 * share
    durable_usd = d.total - 5.0 + 5.0 * share
    assert fixed + jobs * (t - durable_usd) / 1e6 == pytest.approx(0, abs=1e-6)
    assert jobs < at_100  # tasklease's two traces a job thin out more than durable's one


def test_below_a_call_a_second_the_break_even_traces_every_call() -> None:
    _, backlog, d, fixed = _low_and_backlog()
    jobs, shares = cd.break_even_sampled(backlog, d, fixed, prices())
    assert jobs is not None and jobs / (MONTH_H * 3600) < 1
    assert jobs == pytest.approx(cd.break_even(backlog.total, d.total, fixed), rel=1e-9)
    assert set(shares.values()) == {1.0}
    assert cd.break_even_sampled(d, backlog, fixed, prices()) == (None, {})


def test_a_given_xray_share_is_used_at_the_break_even_as_given() -> None:
    low, _, d, fixed = _low_and_backlog()
    label = dict(cm.MODES)[cm.LOW_TRAFFIC]
    for share in (1.0, 0.05):
        given = cb.Options(**{**OPTS.__dict__, "xray_sampled": share, "nat_gateway": False})
        got = cm.price(FIGURES, prices(), given)["durable_functions"][0]["tasklease"][label]
        # every table and the break-even at the share given: 2 traces a job against 1
        low_at, d_at = low.total - 10.0 * (1 - share), d.total - 5.0 * (1 - share)
        assert got["break_even_jobs_per_month"] == round(fixed / ((d_at - low_at) / 1e6))
        assert got["xray_sampled_at_break_even"] == {
            "API": share,
            "worker": share,
            "durable": share,
        }
        assert got["xray_sampling"] == "--xray-sampled"


def test_the_flow_log_and_log_storage_are_said_to_be_not_counted() -> None:
    said = [
        a for a in cm.price(FIGURES, prices(), OPTS)["assumptions"] if a.startswith("not counted:")
    ]
    assert len(said) == 1
    assert "VPC flow log (REJECT only, ingested into CloudWatch Logs" in said[0]
    assert "CloudWatch Logs storage (every log group kept 365 days" in said[0]
