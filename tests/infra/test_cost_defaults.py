"""`tasklease cost` prices the deployment Terraform makes by default: its architecture,
memory sizes, database, endpoints and priority queues are infra/*.tf's defaults."""

from __future__ import annotations

import re

import pytest

from app.cost import base as cost_model
from app.cost import fixed as cost_fixed
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
    assert o.worker_memory_mb == v["worker_memory_mb"]["default"]
    assert o.sweeper_memory_mb == v["sweeper_memory_mb"]["default"]
    assert o.db_storage_gb == v["db_allocated_storage_gb"]["default"]


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
    assert tfconfig.blocks(fn, "tracing_config")[0]["mode"] == "Active"
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
