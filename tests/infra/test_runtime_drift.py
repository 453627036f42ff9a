"""The Lambda runtime and architecture: `make package`, its manifest and Terraform agree.

`scripts/package_lambda.py` builds for the runtimes and architectures it names and
writes both into the manifest beside the zip; Terraform's variables must offer the same
choices with the same defaults, the functions must take them, and the plan must refuse
a package built for another Python or instruction set (`infra/tests/package.tftest.hcl`
plans that against a mock provider; this file checks the wiring without terraform).
"""

from __future__ import annotations

import importlib.util
import json
import re
from types import ModuleType

import pytest

from tests.infra import tfconfig

pytestmark = pytest.mark.unit


def package_script() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "package_lambda", tfconfig.ROOT / "scripts" / "package_lambda.py"
    )
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def choices(variable: str) -> list[str]:
    (validation,) = tfconfig.validations(variable)
    found = re.fullmatch(rf"contains\(\[(.*)\], var\.{variable}\)", validation["condition"].strip())
    assert found, validation["condition"]
    return json.loads(f"[{found.group(1)}]")


def makefile_default(name: str) -> str:
    found = re.search(rf"^{name} \?= (\S+)$", (tfconfig.ROOT / "Makefile").read_text(), re.M)
    assert found, f"the Makefile sets no default for {name}"
    return found.group(1)


def test_terraform_offers_the_runtimes_and_architectures_the_package_builds_for() -> None:
    script = package_script()
    assert choices("lambda_runtime") == list(script.RUNTIMES)
    assert choices("lambda_architecture") == list(script.PLATFORMS)


def test_the_defaults_are_the_same_everywhere() -> None:
    script = package_script()
    variables = tfconfig.variables()
    assert variables["lambda_runtime"]["default"] == script.DEFAULT_RUNTIME == "python3.13"
    assert variables["lambda_architecture"]["default"] == script.DEFAULT_ARCH == "arm64"
    assert makefile_default("LAMBDA_RUNTIME") == script.DEFAULT_RUNTIME
    assert makefile_default("LAMBDA_ARCH") == script.DEFAULT_ARCH
    example = (tfconfig.INFRA / "terraform.tfvars.example").read_text()
    assert re.search(rf'^lambda_runtime\s+= "{script.DEFAULT_RUNTIME}"', example, re.M)
    assert re.search(rf'^lambda_architecture\s+= "{script.DEFAULT_ARCH}"', example, re.M)


def test_each_runtime_is_one_on_amazon_linux_2023_with_its_glibc() -> None:
    # python3.12 and later run on Amazon Linux 2023 (glibc 2.34); python3.11 and older
    # on Amazon Linux 2 (glibc 2.26), whose aarch64 wheels psycopg-binary no longer builds.
    script = package_script()
    for runtime, python in script.RUNTIMES.items():
        assert runtime == f"python{python}"
        assert tuple(int(p) for p in python.split(".")) >= (3, 12)
    for platform in script.PLATFORMS.values():
        assert platform.endswith("-manylinux_2_34")


def test_the_functions_take_the_runtime_and_the_architecture() -> None:
    fn = tfconfig.resources()[("aws_lambda_function", "fn")]
    assert tfconfig.expr(fn["runtime"]) == "var.lambda_runtime"
    assert fn["architectures"] == ["${var.lambda_architecture}"]


@pytest.mark.parametrize(
    ("field", "variable"), [("architecture", "lambda_architecture"), ("runtime", "lambda_runtime")]
)
def test_the_plan_checks_the_manifest_field(field: str, variable: str) -> None:
    fn = tfconfig.resources()[("aws_lambda_function", "fn")]
    (lifecycle,) = tfconfig.blocks(fn, "lifecycle")
    conditions = [tfconfig.expr(p["condition"]) for p in tfconfig.blocks(lifecycle, "precondition")]
    manifest = "jsondecode(file(local.lambda_manifest))"
    assert any(
        f"{manifest}.{field}," in c and c.endswith(f"== var.{variable}") for c in conditions
    ), conditions


def test_the_pythons_the_lock_covers_include_each_runtime() -> None:
    # The package installs the lock's pins for the runtime's Python: the lock must have
    # been resolved for it (requires-python), or its wheels are not in uv.lock.
    script = package_script()
    lock = (tfconfig.ROOT / "uv.lock").read_text()
    found = re.search(r'^requires-python = ">=3\.(\d+), <3\.(\d+)"', lock, re.M)
    assert found, "uv.lock has no requires-python range"
    low, high = int(found.group(1)), int(found.group(2))
    for python in script.RUNTIMES.values():
        assert low <= int(python.split(".")[1]) < high, python
