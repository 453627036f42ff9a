"""The deployment profiles in `tasklease cost` (issue 36): the small profile's lines by
hand on round prices, its custom metrics from the measured EMF lines under its policy,
both profiles side by side, the targets; and the committed price file and figures meet
the small profile's targets, each checked figure recomputed from its price entry."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from app import errors
from app.cli.cost import FIGURES
from app.cost import base as cb
from app.cost import durable as cd
from app.cost import fixed as cf
from app.cost import model as cm
from app.cost import profiles as cp
from app.cost import sides
from app.cost.figures import load_figures
from app.cost.prices import load_prices
from tests.unit.test_cost_cli import invoke, wide_console  # noqa: F401 (autouse: unwrapped output)
from tests.unit.test_cost_model import FIGURES as HAND_FIGURES
from tests.unit.test_cost_model import GB, MONTH_H, lines, prices

pytestmark = pytest.mark.unit

SMALL = cb.Options(profile="small", model_seconds=1.0)
EMF = [
    "tasklease/tasklease_jobs_completed_total[kind=a,outcome=succeeded]",
    "tasklease/tasklease_jobs_completed_total[kind=b,outcome=succeeded]",
    "tasklease/tasklease_jobs_completed_total[kind=b,outcome=dead_lettered]",
    "tasklease/tasklease_jobs_submitted_total[kind=a,replay=false]",
    "tasklease/tasklease_pg_round_trips_total[]",
]


def test_the_small_profile_takes_its_shape() -> None:
    assert SMALL.worker_memory_mb == 256
    assert SMALL.xray_sampled == 0.0  # PassThrough: nothing upstream sends a sampled header
    assert not SMALL.with_nat  # a model with a latency goes out over IPv6
    assert cb.Options(profile="small", nat_gateway=True).with_nat
    assert cb.Options(profile="small", worker_memory_mb=512).worker_memory_mb == 512
    assert cb.Options().profile == "production" and cb.Options().worker_memory_mb == 1024
    with pytest.raises(errors.ConfigError, match="profile: one of small, production"):
        cb.Options(profile="medium")
    with pytest.raises(errors.ConfigError, match="worker_memory_mb: Lambda takes 128"):
        cb.Options(profile="small", worker_memory_mb=0)  # not "the profile's"


def test_the_small_profiles_fixed_lines_by_hand() -> None:
    got = {x.name: x.usd for x in cf.fixed_lines(HAND_FIGURES, SMALL, prices())}
    assert got["RDS instance"] == pytest.approx(0.02 * MONTH_H)  # Single-AZ price
    assert got["RDS storage"] == pytest.approx(20 * 0.1)
    assert got["VPC interface endpoints"] == 0.0
    assert got["Egress-only internet gateway (IPv6)"] == pytest.approx(0.001 * MONTH_H)
    assert "NAT gateway" not in got
    assert got["Sweeper: X-Ray traces"] == 0.0
    # HAND_FIGURES' metrics (a, b) are none of the small profile's list
    assert got["CloudWatch custom metrics"] == 0.0
    sweeps = 60 * MONTH_H
    assert got["Sweeper: Lambda"] == pytest.approx(sweeps * (1e-6 + 0.25 * 0.020 * 0.00001))


def test_production_has_multi_az_endpoints_and_a_nat_gateway_per_zone() -> None:
    opts = cb.Options(model_seconds=1.0)
    got = {x.name: x.usd for x in cf.fixed_lines(HAND_FIGURES, opts, prices())}
    assert got["RDS instance"] == pytest.approx(0.04 * MONTH_H)
    assert got["RDS storage"] == pytest.approx(20 * 0.2)
    assert got["VPC interface endpoints"] == pytest.approx(2 * 2 * MONTH_H * 0.01)
    assert got["NAT gateway"] == pytest.approx(2 * MONTH_H * 0.05)
    assert got["NAT gateway: Elastic IP"] == pytest.approx(2 * MONTH_H * 0.01)
    assert got["Sweeper: X-Ray traces"] == pytest.approx(60 * MONTH_H * 5e-6)


def test_custom_metrics_under_each_profiles_policy() -> None:
    small = cp.custom_metrics(EMF, cp.PROFILES["small"])
    # kinds fold together; outcome stays; replay is dropped; pg round trips not kept
    assert small == [
        "tasklease/tasklease_jobs_completed_total[outcome=dead_lettered]",
        "tasklease/tasklease_jobs_completed_total[outcome=succeeded]",
        "tasklease/tasklease_jobs_submitted_total[]",
    ]
    assert cp.custom_metrics(EMF, cp.PROFILES["production"]) == sorted(EMF)
    figures = {**HAND_FIGURES, "emf_metrics": EMF}
    got = {x.name: x.usd for x in cf.fixed_lines(figures, SMALL, prices())}
    assert got["CloudWatch custom metrics"] == pytest.approx(3 * 0.3)


def test_the_small_profiles_job_lines_by_hand() -> None:
    fig = HAND_FIGURES["kinds"]["k"]
    got = lines(cm.scenario("k", "low", fig, fig["one_per_invocation"], SMALL, prices()))
    # one call a job: $1/M + 0.25 GB x (0.020 + 1.000 model) s x $0.00001 x 1e6
    assert got["Lambda: worker function"] == pytest.approx(1.0 + 0.25 * 1.02 * 10)
    assert got["X-Ray traces recorded"] == 0.0
    d = lines(cd.durable("k", fig, SMALL, prices()))
    # durable functions priced alike: the same memory, the same tracing
    assert d["Lambda: durable function"] == pytest.approx(1.0 + 0.25 * 1.02 * 10)
    assert d["X-Ray traces recorded"] == 0.0


def test_both_profiles_side_by_side_with_the_small_ones_targets() -> None:
    doc = sides.price_profiles(HAND_FIGURES, prices(), "small", model_seconds=1.0)
    assert set(doc["profiles"]) == {"small", "production"}
    assert doc["profile"] == "small" and doc["options"]["profile"] == "small"
    for name, entry in doc["profiles"].items():
        report = entry["report"]
        assert report["options"]["profile"] == name
        assert entry["fixed_monthly_usd"] == report["fixed_per_month"]["total_usd"]
        low = report["per_million_jobs"][0]
        assert entry["per_million_usd"]["k"][cm.LOW_TRAFFIC] == low["total_usd"]
        assert set(entry["per_million_usd"]["k"]) == {key for key, _ in cm.MODES}
        headline = report["durable_functions"][0]["break_even_jobs_per_month"]
        assert entry["break_even_jobs_per_month"] == {"k": headline}
    small, production = doc["profiles"]["small"], doc["profiles"]["production"]
    assert small["fixed_monthly_usd"] < production["fixed_monthly_usd"]
    assert "targets" in small and "targets" not in production
    # HAND_FIGURES has no support.triage: that target is unmeasured, so not met
    (triage,) = [t for t in small["targets"] if "low traffic" in t["what"]]
    assert triage["value"] is None and triage["met"] is False


def test_the_targets_are_met_only_at_or_under_their_figures() -> None:
    def summary(fixed: float, per_million: float, at: int | None) -> dict[str, Any]:
        return {
            "fixed_monthly_usd": fixed,
            "per_million_usd": {"support.triage": {cm.LOW_TRAFFIC: per_million}},
            "break_even_jobs_per_month": {"support.triage": at},
        }

    assert [t["met"] for t in sides.targets(summary(20.0, 15.0, 1_000_000))] == [True] * 3
    assert [t["met"] for t in sides.targets(summary(20.01, 15.01, 1_000_001))] == [False] * 3
    assert not sides.targets(summary(1.0, 1.0, None))[2]["met"]  # never cheaper


# --- the committed price file and figures ----------------------------------------------


def committed() -> dict[str, Any]:
    return sides.price_profiles(load_figures(FIGURES), load_prices(), "production")


def test_the_committed_small_profile_meets_its_targets() -> None:
    small = committed()["profiles"]["small"]
    assert all(t["met"] for t in small["targets"]), small["targets"]
    assert small["fixed_monthly_usd"] <= 20
    assert small["per_million_usd"]["support.triage"][cm.LOW_TRAFFIC] <= 15
    assert small["break_even_jobs_per_month"]["support.triage"] <= 1_000_000


def test_the_committed_small_figures_are_the_price_files_entries_times_the_measures() -> None:
    """Recomputed here from the price file's entries and cost.json's measures: a line
    priced from the wrong entry, or a quantity changed, fails."""
    p = json.loads(Path("app/cost/aws_prices.json").read_text())["prices"]

    def each(name: str) -> float:
        return float(p[name]["usd"]) / float(p[name]["per"])

    figures = json.loads(FIGURES.read_text())
    report = committed()["profiles"]["small"]["report"]
    fixed = {x["name"]: x["usd"] for x in report["fixed_per_month"]["lines"]}
    assert fixed["RDS instance"] == pytest.approx(730 * each("rds_instance_hour"), abs=1e-4)
    assert fixed["RDS storage"] == pytest.approx(20 * each("rds_gp3_gb_month"), abs=1e-4)
    assert fixed["Secrets Manager"] == pytest.approx(each("secrets_manager_secret_month"))
    metrics = cp.custom_metrics(figures["emf_metrics"], cp.PROFILES["small"])
    assert fixed["CloudWatch custom metrics"] == pytest.approx(
        len(metrics) * each("cloudwatch_custom_metric_month"), abs=1e-4
    )
    assert fixed["CloudWatch alarms"] == pytest.approx(6 * each("cloudwatch_alarm_month"))
    polls = 3 * 5 * 3600 / 20 * 730
    assert fixed["SQS: idle long polling"] == pytest.approx(
        polls * each("sqs_standard_request"), abs=1e-4
    )

    run = figures["kinds"]["support.triage"]["one_per_invocation"]
    low = next(
        r
        for r in report["per_million_jobs"]
        if r["kind"] == "support.triage" and r["mode"] == dict(cm.MODES)[cm.LOW_TRAFFIC]
    )
    got = {x["name"]: x["usd"] for x in low["lines"]}
    per_call = run["worker"]["invocations"] / run["jobs"]
    seconds = (run["worker"]["billed_mean_ms"] + 2000) / 1000  # + the 2 s model wait
    worker = per_call * (
        each("lambda_request") + 256 / 1024 * seconds * each("lambda_gb_second_arm64")
    )
    assert got["Lambda: worker function"] == pytest.approx(worker * 1e6, abs=1e-4)
    assert got["X-Ray traces recorded"] == 0.0
    logs = (run["api"]["log_bytes"] + run["worker"]["log_bytes"]) / run["jobs"]
    assert got["CloudWatch Logs: the functions' lines"] == pytest.approx(
        logs / GB * each("cloudwatch_logs_ingested_gb") * 1e6, abs=1e-4
    )


def test_cost_json_carries_each_profiles_figures_for_scripts() -> None:
    code, out = invoke("--json")
    assert code == 0, out
    doc = json.loads(out)
    assert doc["profile"] == "production"
    assert set(doc["profiles"]) == {"small", "production"}
    for entry in doc["profiles"].values():
        assert isinstance(entry["fixed_monthly_usd"], float)
        assert set(entry["per_million_usd"]) == {"demo.noop", "support.triage"}
        for shapes in entry["per_million_usd"].values():
            assert set(shapes) == {"one_per_invocation", "single", "batch"}
            assert all(isinstance(v, float) and v > 0 for v in shapes.values())
        assert all(isinstance(v, int) for v in entry["break_even_jobs_per_month"].values())
    small = doc["profiles"]["small"]
    assert {t["met"] for t in small["targets"]} == {True}
    code, out = invoke("--json", "--profile", "small")
    assert code == 0 and json.loads(out)["options"]["worker_memory_mb"] == 256


def test_the_text_prints_both_profiles_and_the_targets() -> None:
    code, out = invoke()
    assert code == 0, out
    for text in (
        "Profiles (Terraform deployment_profile) side by side",
        "Profile small",
        "Profile production",
        "small profile: fixed per month: $18.00 (target at most $20.00): met",
        "Egress-only internet gateway (IPv6)",
    ):
        assert text in out, text


def test_an_unknown_profile_is_refused_naming_it() -> None:
    code, out = invoke("--profile", "medium")
    assert code != 0 and "profile: one of small, production, got 'medium'" in out
