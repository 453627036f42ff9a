"""`make plan-all`: its checker, its rule for a machine without terraform, and where CI runs it.

The plans themselves run in `make plan-all` (about a minute, terraform and LocalStack);
these are the cheap parts: scripts/plan_check.py on small plans shaped like
`terraform show -json`'s, scripts/plan_matrix.py's NOT RUN rule run as a subprocess
with no terraform on PATH, and .ci/run and the hosted workflow calling the target.
"""

from __future__ import annotations

import copy
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.infra import tfconfig

pytestmark = pytest.mark.unit

SCRIPTS = tfconfig.ROOT / "scripts"
sys.path.insert(0, str(SCRIPTS))
import plan_check  # noqa: E402
import plan_matrix  # noqa: E402

WORKFLOW = tfconfig.ROOT / ".github" / "workflows" / "ci.yml"
PACKAGE = "/repo/infra/build/lambda-arm64.zip"


def _rc(
    address: str, after: dict[str, Any], unknown: dict[str, Any] | None = None
) -> dict[str, Any]:
    rtype = address.split(".")[0]
    return {
        "address": address,
        "mode": "managed",
        "type": rtype,
        "change": {"actions": ["create"], "after": after, "after_unknown": unknown or {}},
    }


def _profile_parts(profile: str) -> list[dict[str, Any]]:
    small = profile == "small"
    changes = [_rc("aws_db_instance.main", {"multi_az": not small})]
    if small:
        changes.append(_rc("aws_egress_only_internet_gateway.main[0]", {}))
        changes += [
            _rc(f"aws_route.private_ipv6[{i}]", {"destination_ipv6_cidr_block": "::/0"})
            for i in range(2)
        ]
    else:
        changes += [
            _rc(f'aws_vpc_endpoint.interface["{s}"]', {}) for s in ("sqs", "secretsmanager")
        ]
    return changes


def good_plan(mode: str, arch: str = "arm64", profile: str = "production") -> dict[str, Any]:
    """The parts of a plan the checker reads, as Terraform writes them for this mode."""
    small = profile == "small"
    changes = [
        _rc(
            f'aws_lambda_function.fn["{fn}"]',
            {
                "runtime": "python3.13",
                "architectures": [arch],
                "filename": PACKAGE,
                "memory_size": (256 if small else 1024) if fn == "worker" else 512,
                "tracing_config": [{"mode": "PassThrough" if small else "Active"}],
                "vpc_config": [{"ipv6_allowed_for_dual_stack": small}],
            },
        )
        for fn in ("api", "worker", "sweeper", "migrate")
    ]
    changes += _profile_parts(profile)
    route_auth = plan_check.ROUTE_AUTH[mode]
    changes.append(
        _rc(
            "aws_apigatewayv2_route.default",
            {
                "authorization_type": route_auth,
                **({"authorizer_id": None} if mode == "api_key" else {}),
            },
            {} if mode == "api_key" else {"authorizer_id": True},
        )
    )
    changes.append(
        _rc(
            'aws_apigatewayv2_route.callbacks["POST /callbacks/{token}"]',
            {"authorization_type": "NONE"},
        )
    )
    if mode == "jwt":
        jwt = {"issuer": plan_check.JWT_ISSUER, "audience": plan_check.JWT_AUDIENCE}
        changes.append(
            _rc(
                "aws_apigatewayv2_authorizer.jwt[0]",
                {"authorizer_type": "JWT", "jwt_configuration": [jwt]},
            )
        )
    if mode == "lambda":
        uri = f"arn:aws:apigateway:us-east-1:lambda:path/2015-03-31/functions/{plan_check.AUTHORIZER_ARN}/invocations"
        changes.append(
            _rc(
                "aws_apigatewayv2_authorizer.lambda[0]",
                {"authorizer_type": "REQUEST", "authorizer_uri": uri},
            )
        )
        changes.append(
            _rc("aws_lambda_permission.authorizer[0]", {"function_name": plan_check.AUTHORIZER_ARN})
        )
    return {"errored": False, "resource_changes": changes}


def problems(plan: dict[str, Any], mode: str, arch: str = "arm64") -> list[str]:
    return plan_check.check_plan(plan, plan_check.Expected(mode, arch, PACKAGE)).problems


def _find(plan: dict[str, Any], address: str) -> dict[str, Any]:
    return next(rc for rc in plan["resource_changes"] if rc["address"] == address)


@pytest.mark.parametrize("mode", sorted(plan_check.ROUTE_AUTH))
@pytest.mark.parametrize("arch", ["arm64", "x86_64"])
def test_a_right_plan_passes(mode: str, arch: str) -> None:
    plan = good_plan(mode, arch)
    report = plan_check.check_plan(plan, plan_check.Expected(mode, arch, PACKAGE))
    assert report.problems == []
    assert (report.to_add, report.functions) == (len(plan["resource_changes"]), 4)


def _set(path: str, value: Any) -> Any:
    def mutate(plan: dict[str, Any]) -> None:
        address, attr = path.rsplit(":", 1)
        _find(plan, address)["change"]["after"][attr] = value

    return mutate


def _drop(address: str) -> Any:
    def mutate(plan: dict[str, Any]) -> None:
        plan["resource_changes"].remove(_find(plan, address))

    return mutate


def _replace(plan: dict[str, Any]) -> None:
    _find(plan, 'aws_lambda_function.fn["worker"]')["change"]["actions"] = ["delete", "create"]


WRONG = {
    "another architecture": (
        "api_key",
        _set('aws_lambda_function.fn["sweeper"]:architectures', ["x86_64"]),
        "architectures",
    ),
    "another runtime": (
        "jwt",
        _set('aws_lambda_function.fn["api"]:runtime', "python3.12"),
        "runtime",
    ),
    "another zip": (
        "lambda",
        _set('aws_lambda_function.fn["worker"]:filename', "build/lambda.zip"),
        "filename",
    ),
    "an open route in jwt": (
        "jwt",
        _set("aws_apigatewayv2_route.default:authorization_type", "NONE"),
        "authorization_type",
    ),
    "no JWT authorizer": ("jwt", _drop("aws_apigatewayv2_authorizer.jwt[0]"), "authorizers"),
    "another issuer": (
        "jwt",
        _set(
            "aws_apigatewayv2_authorizer.jwt[0]:jwt_configuration",
            [{"issuer": "https://x", "audience": ["a"]}],
        ),
        "JWT authorizer",
    ),
    "no invoke permission": (
        "lambda",
        _drop("aws_lambda_permission.authorizer[0]"),
        "invoke the authorizer",
    ),
    "a guarded callback": (
        "lambda",
        _set(
            'aws_apigatewayv2_route.callbacks["POST /callbacks/{token}"]:authorization_type',
            "CUSTOM",
        ),
        "not open",
    ),
    "no api function": ("api_key", _drop('aws_lambda_function.fn["api"]'), 'fn["api"]'),
    "no worker function": ("jwt", _drop('aws_lambda_function.fn["worker"]'), 'fn["worker"]'),
    "a replacement": ("api_key", _replace, "not a creation"),
}


@pytest.mark.parametrize("name", sorted(WRONG))
def test_a_wrong_plan_is_named(name: str) -> None:
    mode, mutate, words = WRONG[name]
    plan = copy.deepcopy(good_plan(mode))
    mutate(plan)
    found = problems(plan, mode)
    assert any(words in p for p in found), found


def test_an_api_key_plan_is_not_a_jwt_plan() -> None:
    found = problems(good_plan("api_key"), "jwt")
    assert any("authorizer" in p for p in found) and any("'JWT'" in p for p in found), found


def test_each_profiles_right_plan_passes_and_the_other_profiles_shape_is_named() -> None:
    for profile, other in (("small", "production"), ("production", "small")):
        plan = good_plan("api_key", profile=profile)
        right = plan_check.check_plan(
            plan, plan_check.Expected("api_key", "arm64", PACKAGE, profile=profile)
        )
        assert right.problems == []
        wrong = plan_check.check_plan(
            plan, plan_check.Expected("api_key", "arm64", PACKAGE, profile=other)
        )
        found = " | ".join(wrong.problems)
        for words in ("interface endpoints", "egress-only", "multi_az", "traces", "MB"):
            assert words in found, (other, found)


def test_a_nat_gateway_or_a_lost_ipv6_route_in_small_is_named() -> None:
    plan = good_plan("api_key", profile="small")
    plan["resource_changes"].append(_rc("aws_nat_gateway.main[0]", {}))
    plan["resource_changes"] = [
        rc for rc in plan["resource_changes"] if rc["address"] != "aws_route.private_ipv6[1]"
    ]
    found = problems_for(plan, "small")
    assert any("NAT gateways" in p for p in found) and any(
        "IPv6 default routes" in p for p in found
    )


def problems_for(plan: dict[str, Any], profile: str) -> list[str]:
    want = plan_check.Expected("api_key", "arm64", PACKAGE, profile=profile)
    return plan_check.check_plan(plan, want).problems


def test_the_matrix_plans_each_profile_on_both_architectures() -> None:
    cases = plan_matrix.cases_for(
        list(plan_check.MODE_VARS), list(plan_matrix.ARCHS), list(plan_check.PROFILES)
    )
    assert {(c.profile, c.arch) for c in cases} == {
        (p, a) for p in plan_check.PROFILES for a in plan_matrix.ARCHS
    }
    assert {c.mode for c in cases if c.profile == "production"} == set(plan_check.MODE_VARS)
    assert len({c.name for c in cases}) == len(cases)


def test_an_unknown_mode_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown api_auth_mode 'iam'"):
        plan_check.check_plan(good_plan("api_key"), plan_check.Expected("iam", "arm64", PACKAGE))


# --- no terraform: NOT RUN, a failure under CI=true only when the workflow does not plan


def run_without_terraform(
    ci: str, workflow: Path, tmp_path: Path
) -> subprocess.CompletedProcess[str]:
    empty = tmp_path / "bin"
    empty.mkdir(exist_ok=True)
    env = {**os.environ, "PATH": str(empty), "TERRAFORM": "", "CI": ci}
    return subprocess.run(
        [sys.executable, str(SCRIPTS / "plan_matrix.py"), "--workflow", str(workflow)],
        env=env, capture_output=True, text=True, check=False, timeout=60, cwd=tmp_path,
    )  # fmt: skip


@pytest.mark.parametrize(
    ("ci", "workflow", "rc"),
    [
        ("true", "real", 0),
        ("true", "missing", 1),
        ("true", "no plan step", 1),
        ("false", "missing", 0),
        ("", "no plan step", 0),
    ],
)
def test_without_terraform_it_says_not_run(ci: str, workflow: str, rc: int, tmp_path: Path) -> None:
    path = {
        "real": WORKFLOW,
        "missing": tmp_path / "ci.yml",
        "no plan step": tmp_path / "other.yml",
    }[workflow]
    if workflow == "no plan step":
        path.write_text(WORKFLOW.read_text().replace("make plan-all", "make plan"))
    done = run_without_terraform(ci, path, tmp_path)
    assert done.returncode == rc, done.stdout + done.stderr
    assert "make plan-all: NOT RUN: terraform is not installed" in done.stdout
    because = {
        "real": "runs `make plan-all`",
        "missing": "is missing",
        "no plan step": "does not run",
    }
    assert because[workflow] in done.stdout
    assert ("CI=true makes this a failure" in done.stdout) == (rc == 1)


@pytest.mark.parametrize(
    ("step", "counts"),
    [
        ("run: make plan-all", True),
        ("run: make plan-all\n        if: false", False),
        ("run: make plan-all\n        continue-on-error: true", False),
        ("run: make plan-all || true", False),
        ("run: make plan", False),
    ],
)
def test_only_a_step_that_can_fail_counts_as_the_workflow_planning(
    tmp_path: Path, step: str, counts: bool
) -> None:
    workflow = tmp_path / "ci.yml"
    workflow.write_text(f"jobs:\n  test:\n    steps:\n      - {step}\n")
    assert plan_matrix.workflow_runs_plan(workflow) is counts


def test_the_rule_names_why() -> None:
    rc, why = plan_matrix.terraform_missing(True, Path("/nonexistent/ci.yml"))
    assert rc == 1 and "/nonexistent/ci.yml is missing" in why and "CI=true" in why


# --- where it runs


def test_ci_run_plans_after_the_static_checks() -> None:
    steps = re.findall(
        r"^(?:step )?make ([\w-]+)", (tfconfig.ROOT / ".ci" / "run").read_text(), re.MULTILINE
    )
    assert "plan-all" in steps
    assert steps.index("plan-all") > steps.index("infra-check")


def test_the_makefile_target_runs_the_matrix() -> None:
    makefile = (tfconfig.ROOT / "Makefile").read_text()
    recipe = re.search(r"^plan-all:.*\n\t(.*)", makefile, re.MULTILINE)
    assert recipe and "scripts/plan_matrix.py" in recipe.group(1)
    assert re.search(r"^\.PHONY:.*\bplan-all\b", makefile, re.MULTILINE)


def _steps(job: dict[str, Any]) -> list[dict[str, Any]]:
    return list(job["steps"])


def test_the_hosted_workflow_plans_with_terraform() -> None:
    jobs = yaml.safe_load(WORKFLOW.read_text())["jobs"]
    steps = _steps(jobs["test"])
    uses = [s.get("uses", "") for s in steps]
    runs = [s.get("run", "") for s in steps]
    plan_at = runs.index("make plan-all")
    terraform_at = next(i for i, u in enumerate(uses) if u.startswith("hashicorp/setup-terraform"))
    localstack_at = runs.index("bash localstack/run.sh start")
    assert terraform_at < plan_at and localstack_at < plan_at


def test_an_arm64_runner_imports_the_arm64_zip() -> None:
    job = yaml.safe_load(WORKFLOW.read_text())["jobs"]["package-arm64"]
    assert job["runs-on"] == "ubuntu-24.04-arm"
    steps = _steps(job)
    python = next(s for s in steps if s.get("uses", "").startswith("actions/setup-python"))
    assert "3.13" in str(python["with"]["python-version"]).split()
    runs = [s.get("run", "") for s in steps]
    assert "make install" in runs
    assert any(r.startswith(".venv/bin/pytest tests/infra/test_package.py") for r in runs)


def test_sigterm_still_runs_the_cleanup(tmp_path: Path) -> None:
    # The override file and LocalStack are removed by ExitStack callbacks, which a bare
    # SIGTERM would skip; exit_on_signals turns it into SystemExit so they run.
    done = tmp_path / "cleaned"
    code = (
        "import sys, time, contextlib; sys.path.insert(0, sys.argv[1]); import plan_matrix\n"
        "plan_matrix.exit_on_signals()\n"
        "with contextlib.ExitStack() as stack:\n"
        "    stack.callback(lambda: open(sys.argv[2], 'w').close())\n"
        "    print('ready', flush=True); time.sleep(60)\n"
    )
    with subprocess.Popen(
        [sys.executable, "-c", code, str(tfconfig.ROOT / "scripts"), str(done)],
        stdout=subprocess.PIPE,
        text=True,
    ) as proc:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
        proc.terminate()
        assert proc.wait(timeout=30) == 128 + 15
    assert done.exists()
