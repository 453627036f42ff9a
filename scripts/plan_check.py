"""Check a saved Terraform plan (`terraform show -json`) for what one case must produce.

`make plan-all` (scripts/plan_matrix.py) plans every api_auth_mode on both Lambda
architectures against LocalStack; an exit code of 0 only says Terraform could plan.
This reads the plan itself: every function on the runtime, the architecture and the
zip the case asked for, the route's authorization and authorizer for the mode, the
callback routes open, nothing but creations (the plan starts from an empty state), and
the deployment_profile's shape (small: no interface endpoints or NAT gateway, IPv6 out
through an egress-only internet gateway, Single-AZ, worker 256 MB, tracing PassThrough;
production: interface endpoints, Multi-AZ, worker 1024 MB, tracing Active).
The functions' environment is unknown until apply (it holds queue URLs), so what the
API function is told to trust is checked by `terraform test` (infra/tests/auth.tftest.hcl).

    python scripts/plan_check.py PLAN.json --mode jwt --arch arm64 --package PATH [--profile small]
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

RUNTIME = "python3.13"
# What each api_auth_mode sets (infra/apigateway.tf local.api_auth); the example values
# scripts/plan_matrix.py passes for the modes that need some.
ROUTE_AUTH = {"api_key": "NONE", "jwt": "JWT", "lambda": "CUSTOM"}
JWT_ISSUER = "https://cognito-idp.us-east-1.amazonaws.com/us-east-1_EXAMPLE"
JWT_AUDIENCE = ["tasklease-example-client"]
AUTHORIZER_ARN = "arn:aws:lambda:us-east-1:123456789012:function:tenant-authorizer"
MODE_VARS: dict[str, dict[str, str]] = {
    "api_key": {},
    "jwt": {"jwt_issuer": JWT_ISSUER, "jwt_audience": json.dumps(JWT_AUDIENCE)},
    "lambda": {"lambda_authorizer_function_arn": AUTHORIZER_ARN},
}


PROFILES = ("production", "small")


@dataclass
class Expected:
    mode: str
    arch: str
    package: str
    runtime: str = RUNTIME
    profile: str = "production"


@dataclass
class Report:
    to_add: int = 0
    functions: int = 0
    route_auth: str = "?"
    problems: list[str] = field(default_factory=list)


def _changes(plan: dict[str, Any], rtype: str) -> dict[str, dict[str, Any]]:
    return {
        rc["address"]: rc
        for rc in plan.get("resource_changes", [])
        if rc.get("mode") == "managed" and rc.get("type") == rtype
    }


def _after(rc: dict[str, Any]) -> dict[str, Any]:
    after = rc.get("change", {}).get("after") or {}
    return after if isinstance(after, dict) else {}


def _unknown(rc: dict[str, Any], attr: str) -> bool:
    return bool((rc.get("change", {}).get("after_unknown") or {}).get(attr))


def _check_actions(plan: dict[str, Any], report: Report) -> None:
    managed = [rc for rc in plan.get("resource_changes", []) if rc.get("mode") == "managed"]
    report.to_add = sum(1 for rc in managed if rc["change"]["actions"] == ["create"])
    others = [rc["address"] for rc in managed if rc["change"]["actions"] != ["create"]]
    if others:
        report.problems.append(f"not a creation from an empty state: {', '.join(others[:5])}")
    if plan.get("errored"):
        report.problems.append("the plan is marked errored")


# The functions infra/lambda.tf deploys (local.functions): each must be in every plan.
FUNCTIONS = ("api", "worker", "sweeper", "migrate")


def _check_functions(plan: dict[str, Any], want: Expected, report: Report) -> None:
    functions = _changes(plan, "aws_lambda_function")
    report.functions = len(functions)
    if not functions:
        report.problems.append("no aws_lambda_function in the plan")
    for address, rc in functions.items():
        after = _after(rc)
        for attr, expected in (
            ("runtime", want.runtime),
            ("architectures", [want.arch]),
            ("filename", want.package),
        ):
            if after.get(attr) != expected:
                report.problems.append(f"{address}.{attr} is {after.get(attr)!r}, not {expected!r}")
    expected = {f'aws_lambda_function.fn["{name}"]' for name in FUNCTIONS}
    if missing := sorted(expected - set(functions)):
        report.problems.append(f"functions missing from the plan: {', '.join(missing)}")


def _check_routes(plan: dict[str, Any], want: Expected, report: Report) -> None:
    routes = _changes(plan, "aws_apigatewayv2_route")
    default = routes.get("aws_apigatewayv2_route.default")
    if default is None:
        report.problems.append("no aws_apigatewayv2_route.default")
        return
    after = _after(default)
    report.route_auth = str(after.get("authorization_type"))
    if after.get("authorization_type") != ROUTE_AUTH[want.mode]:
        report.problems.append(
            f"the $default route's authorization_type is {report.route_auth!r}, not {ROUTE_AUTH[want.mode]!r}"
        )
    has_authorizer = _unknown(default, "authorizer_id") or after.get("authorizer_id") is not None
    if has_authorizer != (want.mode != "api_key"):
        report.problems.append(
            f"the $default route {'has' if has_authorizer else 'lacks'} an authorizer in mode {want.mode}"
        )
    callbacks = [a for a in routes if a.startswith("aws_apigatewayv2_route.callbacks")]
    if not callbacks:
        report.problems.append("no callback routes")
    for address in callbacks:
        if _after(routes[address]).get("authorization_type") != "NONE":
            report.problems.append(f"{address} is not open (authorization_type NONE)")


def _check_authorizers(plan: dict[str, Any], want: Expected, report: Report) -> None:
    authorizers = _changes(plan, "aws_apigatewayv2_authorizer")
    permissions = _changes(plan, "aws_lambda_permission")
    expected = {
        "api_key": set(),
        "jwt": {"aws_apigatewayv2_authorizer.jwt[0]"},
        "lambda": {"aws_apigatewayv2_authorizer.lambda[0]"},
    }[want.mode]
    if set(authorizers) != expected:
        report.problems.append(f"authorizers {sorted(authorizers)}, not {sorted(expected)}")
        return
    if want.mode == "jwt":
        after = _after(authorizers["aws_apigatewayv2_authorizer.jwt[0]"])
        jwt = (after.get("jwt_configuration") or [{}])[0]
        if after.get("authorizer_type") != "JWT" or jwt.get("issuer") != JWT_ISSUER:
            report.problems.append(
                f"the JWT authorizer is {after.get('authorizer_type')!r} for {jwt.get('issuer')!r}"
            )
        if sorted(jwt.get("audience") or []) != sorted(JWT_AUDIENCE):
            report.problems.append(f"the JWT authorizer's audience is {jwt.get('audience')!r}")
    perm = permissions.get("aws_lambda_permission.authorizer[0]")
    if want.mode == "lambda":
        after = _after(authorizers["aws_apigatewayv2_authorizer.lambda[0]"])
        if after.get("authorizer_type") != "REQUEST" or AUTHORIZER_ARN not in str(
            after.get("authorizer_uri")
        ):
            report.problems.append(
                f"the Lambda authorizer is {after.get('authorizer_type')!r} at {after.get('authorizer_uri')!r}"
            )
        if perm is None or _after(perm).get("function_name") != AUTHORIZER_ARN:
            report.problems.append(
                "API Gateway is not allowed to invoke the authorizer (aws_lambda_permission.authorizer)"
            )
    elif perm is not None:
        report.problems.append(f"aws_lambda_permission.authorizer in mode {want.mode}")


# What each profile deploys (infra/locals.tf local.profiles; app/cost/profiles.py prices it).
SHAPES: dict[str, dict[str, Any]] = {
    "small": {
        "interface_endpoints": 0,
        "egress_only_gateways": 1,
        "multi_az": False,
        "worker_memory": 256,
        "tracing": "PassThrough",
        "ipv6": True,
    },
    "production": {
        "interface_endpoints": 2,
        "egress_only_gateways": 0,
        "multi_az": True,
        "worker_memory": 1024,
        "tracing": "Active",
        "ipv6": False,
    },
}


def _check_profile(plan: dict[str, Any], want: Expected, report: Report) -> None:
    shape = SHAPES[want.profile]
    where = f"profile {want.profile}"
    endpoints = [
        a for a in _changes(plan, "aws_vpc_endpoint") if a.startswith("aws_vpc_endpoint.interface")
    ]
    if len(endpoints) != shape["interface_endpoints"]:
        report.problems.append(
            f"{where}: {len(endpoints)} interface endpoints, not {shape['interface_endpoints']}"
        )
    eigw = _changes(plan, "aws_egress_only_internet_gateway")
    if len(eigw) != shape["egress_only_gateways"]:
        report.problems.append(
            f"{where}: {len(eigw)} egress-only internet gateways, not {shape['egress_only_gateways']}"
        )
    ipv6_routes = [
        rc
        for rc in _changes(plan, "aws_route").values()
        if _after(rc).get("destination_ipv6_cidr_block") == "::/0"
    ]
    if shape["ipv6"] and len(ipv6_routes) < 2:
        report.problems.append(f"{where}: {len(ipv6_routes)} IPv6 default routes, not one per zone")
    if not shape["ipv6"] and ipv6_routes:
        report.problems.append(f"{where}: an IPv6 default route")
    if nat := _changes(plan, "aws_nat_gateway"):
        report.problems.append(f"{where}: NAT gateways without enable_nat_gateway: {sorted(nat)}")
    db = _changes(plan, "aws_db_instance").get("aws_db_instance.main")
    if db is None or _after(db).get("multi_az") is not shape["multi_az"]:
        got = None if db is None else _after(db).get("multi_az")
        report.problems.append(
            f"{where}: the database's multi_az is {got!r}, not {shape['multi_az']}"
        )
    for address, rc in _changes(plan, "aws_lambda_function").items():
        after = _after(rc)
        mode = (after.get("tracing_config") or [{}])[0].get("mode")
        if mode != shape["tracing"]:
            report.problems.append(f"{where}: {address} traces {mode!r}, not {shape['tracing']!r}")
        vpc = (after.get("vpc_config") or [{}])[0]
        if bool(vpc.get("ipv6_allowed_for_dual_stack")) != shape["ipv6"]:
            report.problems.append(
                f"{where}: {address} ipv6_allowed_for_dual_stack is {vpc.get('ipv6_allowed_for_dual_stack')!r}"
            )
    worker = _changes(plan, "aws_lambda_function").get('aws_lambda_function.fn["worker"]')
    if worker is not None and _after(worker).get("memory_size") != shape["worker_memory"]:
        report.problems.append(
            f"{where}: the worker has {_after(worker).get('memory_size')} MB, not {shape['worker_memory']}"
        )


def check_plan(plan: dict[str, Any], want: Expected) -> Report:
    """Everything the plan gets wrong for this case (an empty `problems`: it is right)."""
    if want.mode not in ROUTE_AUTH:
        raise ValueError(f"unknown api_auth_mode {want.mode!r}: one of {', '.join(ROUTE_AUTH)}")
    if want.profile not in SHAPES:
        raise ValueError(f"unknown deployment_profile {want.profile!r}: one of {', '.join(SHAPES)}")
    report = Report()
    _check_actions(plan, report)
    _check_functions(plan, want, report)
    _check_routes(plan, want, report)
    _check_authorizers(plan, want, report)
    _check_profile(plan, want, report)
    return report


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("plan_json", type=Path, help="`terraform show -json PLAN` output")
    parser.add_argument("--mode", required=True, choices=sorted(ROUTE_AUTH))
    parser.add_argument("--arch", required=True, choices=["arm64", "x86_64"])
    parser.add_argument(
        "--package", required=True, help="the lambda_package_path the plan was given"
    )
    parser.add_argument("--runtime", default=RUNTIME)
    parser.add_argument("--profile", default="production", choices=PROFILES)
    args = parser.parse_args(argv)
    report = check_plan(
        json.loads(args.plan_json.read_text()),
        Expected(args.mode, args.arch, args.package, args.runtime, args.profile),
    )
    for problem in report.problems:
        print(f"plan_check: {args.plan_json}: {problem}", file=sys.stderr)
    print(
        f"plan_check: {report.to_add} to add, {report.functions} functions, route {report.route_auth}"
    )
    return 1 if report.problems else 0


if __name__ == "__main__":
    sys.exit(main())
