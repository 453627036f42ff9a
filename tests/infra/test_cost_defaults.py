"""`tasklease cost` prices the deployment Terraform makes by default: its architecture,
memory sizes, database, endpoints and priority queues are infra/*.tf's defaults."""

from __future__ import annotations

import re

import pytest

from app.cost import base as cost_model
from app.cost import fixed as cost_fixed
from app.cost import profiles as cost_profiles
from tests.infra import tfconfig

pytestmark = pytest.mark.unit


@pytest.mark.parametrize("name", sorted(cost_model.TERRAFORM_DEFAULTS))
def test_the_cost_defaults_are_terraforms(name: str) -> None:
    assert tfconfig.variables()[name]["default"] == cost_model.TERRAFORM_DEFAULTS[name], (
        f"infra/variables.tf's {name} default changed: update app/cost/model.py's TERRAFORM_DEFAULTS"
    )


def test_the_options_default_to_terraforms() -> None:
    o = cost_model.Options()
    v = tfconfig.variables()
    assert o.arch == v["lambda_architecture"]["default"]
    assert o.api_memory_mb == v["api_memory_mb"]["default"]
    assert o.profile == v["deployment_profile"]["default"]
    # null: the profile's
    assert v["worker_memory_mb"]["default"] is None and v["db_multi_az"]["default"] is None
    assert o.worker_memory_mb == cost_profiles.PROFILES[o.profile].worker_memory_mb
    assert o.sweeper_memory_mb == v["sweeper_memory_mb"]["default"]
    assert o.db_storage_gb == v["db_allocated_storage_gb"]["default"]


def _tf_emf(value: str) -> tuple[str, ...] | None:
    return None if value == "all" else tuple(value.split(","))


@pytest.mark.parametrize("name", sorted(cost_profiles.PROFILES))
def test_each_profile_is_terraforms(name: str) -> None:
    """app/cost/profiles.py prices what infra/locals.tf's local.profiles deploys."""
    tf = tfconfig.locals_()["profiles"]
    assert set(tf) == set(cost_profiles.PROFILES)
    p = cost_profiles.PROFILES[name]
    got = tf[name]
    assert set(got) == {f for f in p.__dataclass_fields__ if f != "name"}
    for field in ("interface_endpoints", "ipv6_egress", "nat_gateway_per_az", "db_multi_az"):
        assert got[field] is getattr(p, field), field
    assert got["worker_memory_mb"] == p.worker_memory_mb
    assert got["tracing_mode"] == p.tracing_mode
    assert _tf_emf(got["emf_metrics"]) == p.emf_metrics
    assert _tf_emf(got["emf_dimensions"]) == p.emf_dimensions
    validation = tfconfig.expr(
        tfconfig.variables()["deployment_profile"]["validation"][0]["condition"]
    )
    assert f'"{name}"' in validation


def test_the_profile_drives_the_resources_it_prices() -> None:
    """Each priced choice reads local.profile, not a fixed value."""
    r = tfconfig.resources()
    fn = r[("aws_lambda_function", "fn")]
    assert tfconfig.blocks(fn, "tracing_config")[0]["mode"] == "${local.profile.tracing_mode}"
    assert "local.profile.ipv6_egress" in tfconfig.expr(
        tfconfig.blocks(fn, "vpc_config")[0]["ipv6_allowed_for_dual_stack"]
    )
    assert "local.profile.interface_endpoints" in tfconfig.expr(
        r[("aws_vpc_endpoint", "interface")]["for_each"]
    )
    assert tfconfig.expr(r[("aws_db_instance", "main")]["multi_az"]) == "local.db_multi_az"
    assert "local.profile.nat_gateway_per_az" in tfconfig.expr(tfconfig.locals_()["nat_gateways"])
    assert tfconfig.expr(r[("aws_nat_gateway", "main")]["count"]) == "local.nat_gateways"
    assert "local.profile.ipv6_egress" in tfconfig.expr(
        r[("aws_egress_only_internet_gateway", "main")]["count"]
    )


def test_the_interface_endpoints_availability_zones_and_priority_queues() -> None:
    endpoints = tfconfig.resources()[("aws_vpc_endpoint", "interface")]["for_each"]
    assert len(re.findall(r'"[a-z]+"', endpoints)) == cost_model.INTERFACE_ENDPOINTS
    assert tfconfig.variables()["availability_zones"]["default"] == []
    azs = tfconfig.expr(tfconfig.locals_()["azs"])
    assert len(re.findall(r"\$\{var\.aws_region\}[a-z]", azs)) == cost_model.AVAILABILITY_ZONES
    priorities = tfconfig.expr(tfconfig.locals_()["priorities"])
    listed = re.search(r"for p in \[([^\]]*)\]", priorities)
    assert listed is not None
    assert len(listed.group(1).split(",")) == cost_model.PRIORITY_QUEUES


def test_the_alarms_are_monitoring_tfs() -> None:
    alarms = [
        body
        for (kind, _), body in tfconfig.resources().items()
        if kind == "aws_cloudwatch_metric_alarm"
    ]
    assert all("local.priorities" in tfconfig.expr(a["for_each"]) for a in alarms)
    assert len(alarms) * cost_model.PRIORITY_QUEUES == cost_model.ALARMS


def test_the_access_log_estimate_has_the_stages_fields() -> None:
    stage = tfconfig.resources()[("aws_apigatewayv2_stage", "default")]
    fmt = tfconfig.expr(tfconfig.blocks(stage, "access_log_settings")[0]["format"])
    assert set(re.findall(r"(\w+)\s*=\s*\"\$context", fmt)) == set(cost_model.ACCESS_LOG_SAMPLE)


def test_lambda_writes_its_own_lines_as_text_with_tracing() -> None:
    fn = tfconfig.resources()[("aws_lambda_function", "fn")]
    modes = {p.tracing_mode for p in cost_profiles.PROFILES.values()}
    assert modes == {"Active", "PassThrough"}
    assert tfconfig.blocks(fn, "logging_config")[0]["log_format"] == "Text"


def test_the_worker_timeout_bounds_the_model_wait() -> None:
    assert tfconfig.shared_settings()["worker_timeout_seconds"] == cost_model.WORKER_TIMEOUT_SECONDS


def test_the_sweeps_a_month_follow_the_schedule_variable() -> None:
    schedule = tfconfig.variables()["sweeper_schedule_expression"]["default"]
    assert cost_fixed.runs_per_month(schedule) == cost_fixed.SWEEPS_PER_MONTH


def test_the_flow_log_left_uncounted_is_the_one_deployed() -> None:
    flow = tfconfig.resources()[("aws_flow_log", "main")]
    assert flow["traffic_type"] == cost_model.FLOW_LOG_TRAFFIC
    assert "aws_cloudwatch_log_group.flow_logs" in tfconfig.expr(flow["log_destination"])
