"""`tasklease cost` prices the deployment Terraform makes by default: its architecture,
memory sizes, database, endpoints and priority queues are infra/*.tf's defaults."""

from __future__ import annotations

import re

import pytest

from app.cli import cost_model
from tests.infra import tfconfig

pytestmark = pytest.mark.unit


@pytest.mark.parametrize("name", sorted(cost_model.TERRAFORM_DEFAULTS))
def test_the_cost_defaults_are_terraforms(name: str) -> None:
    assert tfconfig.variables()[name]["default"] == cost_model.TERRAFORM_DEFAULTS[name], (
        f"infra/variables.tf's {name} default changed: update app/cli/cost_model.py's TERRAFORM_DEFAULTS"
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
