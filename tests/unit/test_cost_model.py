"""`tasklease cost`'s arithmetic on hand-made figures and round prices: every line is the
hand computation written out, so a change in the model fails here, naming the line."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from app.cli import cost_model as cm
from app.cli.cost_prices import REQUIRED_PRICES, PriceTable, load_prices, parse_prices

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
    "vpc_interface_endpoint_hour": (0.01, 1),
    "nat_gateway_hour": (0.05, 1),
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
    "figures_version": 1,
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
        }
    },
    "sweeper_idle": {
        "invocations": 2,
        "billed_mean_ms": 20,
        "sqs": {"calls": {"GetQueueAttributes": 6}},
        "pg_round_trips": 10,
        "log_bytes": 1_000,
    },
}
OPTS = cm.Options(
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
    assert got["CloudWatch Logs ingestion"] == pytest.approx(1500 / GB * 1.0 * 1e6)
    assert s.total == pytest.approx(sum(got.values()))
    assert s.db_round_trips_per_job == pytest.approx(2.7)


def test_the_model_wait_is_billed_once_per_worker_invocation_and_follows_the_flag() -> None:
    fig = FIGURES["kinds"]["k"]
    no_wait = cm.Options(**{**OPTS.__dict__, "model_seconds": 0.0})
    worker = lines(cm.scenario("k", "single", fig, fig["single"], no_wait, prices()))
    assert worker["Lambda: worker function"] == pytest.approx(0.1 * (1.0 + 2 * 0.05 * 10))


def test_x86_costs_its_own_gb_second_price() -> None:
    fig = FIGURES["kinds"]["k"]
    x86 = cm.Options(**{**OPTS.__dict__, "arch": "x86_64"})
    got = lines(cm.scenario("k", "single", fig, fig["single"], x86, prices()))
    assert got["Lambda: API function"] == pytest.approx(1.0 + 0.2)


def test_the_fixed_monthly_lines() -> None:
    got = {line.name: line.usd for line in cm.fixed_lines(FIGURES, OPTS, prices())}
    sweeps = 60 * MONTH_H
    assert got["RDS instance"] == pytest.approx(0.02 * MONTH_H)
    assert got["RDS storage"] == pytest.approx(20 * 0.1)
    assert got["VPC interface endpoints"] == pytest.approx(2 * 2 * MONTH_H * 0.01)
    assert got["Secrets Manager"] == pytest.approx(0.4)
    assert got["NAT gateway"] == 0.0
    assert got["Sweeper: Lambda"] == pytest.approx(sweeps * (1e-6 + 0.25 * 0.020 * 0.00001))
    assert got["Sweeper: EventBridge Scheduler"] == pytest.approx(sweeps * 1e-6)
    assert got["Sweeper: SQS"] == pytest.approx(sweeps * 3 * 0.5e-6)
    assert got["Sweeper: CloudWatch Logs"] == pytest.approx(sweeps * 500 / GB)
    # 3 mappings x 5 pollers x 180 polls an hour
    assert got["SQS: idle long polling"] == pytest.approx(3 * 5 * 180 * MONTH_H * 0.5e-6)


def test_a_nat_gateway_is_a_fixed_line_when_deployed() -> None:
    with_nat = cm.Options(**{**OPTS.__dict__, "nat_gateway": True})
    got = {line.name: line.usd for line in cm.fixed_lines(FIGURES, with_nat, prices())}
    assert got["NAT gateway"] == pytest.approx(0.05 * MONTH_H)


def test_the_durable_function_comparison() -> None:
    d = cm.durable("k", FIGURES["kinds"]["k"], OPTS, prices())
    got = lines(d)
    # one invocation of 20 ms + 1,000 ms model at 2 GB
    assert got["Lambda: durable function"] == pytest.approx(1.0 + 2 * 1.02 * 10)
    assert got["Durable operations"] == pytest.approx(3 * 8.0)  # start + 2 steps
    assert got["Durable data written"] == pytest.approx(600 / GB * 0.25 * 1e6)
    retained = 600 / GB * 14 * 24 / MONTH_H * 0.15 * 1e6
    assert got["Durable data retained"] == pytest.approx(retained)


def test_a_kind_without_effects_is_one_step() -> None:
    fig = copy.deepcopy(FIGURES["kinds"]["k"]) | {"effects_per_job": 0, "model_calls_per_job": 0}
    assert lines(cm.durable("k", fig, OPTS, prices()))["Durable operations"] == pytest.approx(16.0)


def test_break_even() -> None:
    assert cm.break_even(2.0, 12.0, 50.0) == pytest.approx(5_000_000)
    assert cm.break_even(12.0, 2.0, 50.0) is None


def test_the_report_holds_every_part() -> None:
    doc = cm.price(FIGURES, prices(), OPTS)
    assert [r["mode"] for r in doc["per_million_jobs"]] == [label for _, label in cm.MODES]
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
