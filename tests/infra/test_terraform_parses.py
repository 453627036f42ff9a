"""infra/*.tf, checked statically: it parses, it is documented, and IAM grants only what the code uses.

No terraform binary is needed (CI's workflow adds `terraform validate` and a plan).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from tests.infra import tfconfig

pytestmark = pytest.mark.unit

# Variables that need no validation block: free-form by nature.
FREE_FORM = {"tags", "alarm_actions", "lambda_package_path"}


@pytest.mark.parametrize("path", tfconfig.tf_files(), ids=lambda p: p.name)
def test_every_tf_file_parses(path: Path) -> None:
    assert isinstance(tfconfig.parse(path), dict)


def test_the_expected_files_are_there() -> None:
    names = {p.name for p in tfconfig.tf_files()}
    for required in ("versions.tf", "variables.tf", "outputs.tf", "sqs.tf", "lambda.tf", "iam.tf"):
        assert required in names
    assert (tfconfig.INFRA / "terraform.tfvars.example").is_file()
    assert (tfconfig.INFRA / "README.md").is_file()


def test_aws_provider_is_pinned_to_major_5() -> None:
    providers = [
        p
        for doc in tfconfig.config().values()
        for t in doc.get("terraform", [])
        for block in t.get("required_providers", [])
        for p in [block.get("aws")]
        if p
    ]
    assert providers, "versions.tf must declare required_providers.aws"
    assert providers[0]["source"] == "hashicorp/aws"
    assert providers[0]["version"].startswith("~> 5")


def test_every_variable_has_a_description_and_a_type() -> None:
    variables = tfconfig.variables()
    assert variables
    for name, body in variables.items():
        assert str(body.get("description", "")).strip(), f"variable {name} has no description"
        assert "type" in body, f"variable {name} has no type"


def test_every_constrained_variable_has_a_validation() -> None:
    for name, body in tfconfig.variables().items():
        if name in FREE_FORM or body.get("type") == "bool":
            continue
        checks = tfconfig.blocks(body, "validation")
        assert checks, f"variable {name} has no validation block"
        for check in checks:
            assert str(check.get("error_message", "")).strip(), (
                f"{name}: validation without a message"
            )


def test_tfvars_example_sets_only_declared_variables() -> None:
    text = (tfconfig.INFRA / "terraform.tfvars.example").read_text()
    declared = set(tfconfig.variables())
    # Both the set lines and the commented-out ones must name real variables.
    names = re.findall(r"^#?\s*([a-z][a-z0-9_]*)\s*=", text, flags=re.M)
    assert names
    unknown = sorted(set(names) - declared)
    assert not unknown, f"terraform.tfvars.example names undeclared variables: {unknown}"


def test_outputs_give_the_api_url_and_the_queue_urls() -> None:
    outputs: dict[str, Any] = {}
    for doc in tfconfig.config().values():
        for block in doc.get("output", []):
            outputs.update(block)
    for name in ("api_url", "queue_url", "dlq_url"):
        assert name in outputs, f"output {name} is missing"
        assert str(outputs[name].get("description", "")).strip()


# --- references ------------------------------------------------------------------


def _iam_bodies() -> list[tuple[str, Any]]:
    """Every IAM policy document, role, role policy and attachment, by address."""
    out: list[tuple[str, Any]] = []
    for (t, n), body in tfconfig.data_sources().items():
        if t == "aws_iam_policy_document":
            out.append((f"data.{t}.{n}", body))
    for (t, n), body in tfconfig.resources().items():
        if t.startswith("aws_iam_"):
            out.append((f"{t}.{n}", body))
    return out


def _missing(body: Any) -> list[str]:
    resources = set(tfconfig.resources())
    data = set(tfconfig.data_sources())
    missing = []
    for is_data, t, n in tfconfig.refs(body):
        if (t, n) not in (data if is_data else resources):
            missing.append(f"{'data.' if is_data else ''}{t}.{n}")
    return sorted(missing)


def test_every_resource_referenced_in_iam_policies_exists() -> None:
    bodies = _iam_bodies()
    assert len(bodies) > 5
    for address, body in bodies:
        assert not _missing(body), f"{address} refers to undeclared {_missing(body)}"


def test_every_reference_anywhere_resolves() -> None:
    for name, doc in tfconfig.config().items():
        assert not _missing(doc), f"{name} refers to undeclared {_missing(doc)}"


def test_every_local_and_variable_reference_resolves() -> None:
    text = json.dumps(tfconfig.config())
    local_names = set(tfconfig.locals_())
    for name in set(re.findall(r"\blocal\.([a-z0-9_]+)", text)):
        assert name in local_names, f"local.{name} is not defined"
    for name in set(re.findall(r"\bvar\.([a-z0-9_]+)", text)):
        assert name in tfconfig.variables(), f"var.{name} is not declared"


# --- least privilege ---------------------------------------------------------------

# Every priority's queue (infra/sqs.tf) is granted alike.
QUEUE = {
    f'aws_sqs_queue.{queue}["{p}"].arn': queue
    for queue in ("source", "dlq")
    for p in ("high", "normal", "low")
}

# What each function may do to which queue: the brief of issue 5, checked
# against the SQS calls in app/ (see the header of infra/iam.tf).
EXPECTED_SQS = {
    "api": {"source": {"sqs:SendMessage", "sqs:GetQueueAttributes"}},
    "worker": {
        "source": {
            "sqs:ReceiveMessage",
            "sqs:DeleteMessage",
            "sqs:ChangeMessageVisibility",
            "sqs:GetQueueAttributes",
            # wake-ups, children, parents, released parked jobs, deferred re-sends
            "sqs:SendMessage",
        },
        "dlq": {"sqs:SendMessage"},
    },
    "sweeper": {
        "source": {"sqs:SendMessage"},
        "dlq": {
            "sqs:ReceiveMessage",
            "sqs:DeleteMessage",
            "sqs:GetQueueAttributes",
            "sqs:StartMessageMoveTask",
            "sqs:ListMessageMoveTasks",
        },
    },
    "migrate": {},
}


def _grants(doc_name: str) -> dict[str, set[str]]:
    body = tfconfig.data_sources()[("aws_iam_policy_document", doc_name)]
    grants: dict[str, set[str]] = {}
    for statement in tfconfig.blocks(body, "statement"):
        assert statement.get("effect", "Allow") == "Allow"
        for resource in statement["resources"]:
            target = QUEUE.get(tfconfig.expr(resource), tfconfig.expr(resource))
            grants.setdefault(target, set()).update(statement["actions"])
    return grants


@pytest.mark.parametrize("function", sorted(EXPECTED_SQS))
def test_each_function_gets_only_its_sqs_actions_on_only_its_queues(function: str) -> None:
    assert _grants(function) == EXPECTED_SQS[function]


def test_the_database_secret_is_the_only_secret_and_readable_only() -> None:
    grants = _grants("db_secret")
    assert grants == {
        "aws_db_instance.main.master_user_secret[0].secret_arn": {"secretsmanager:GetSecretValue"}
    }


def test_each_role_combines_its_own_policy_the_secret_and_its_own_logs() -> None:
    body = tfconfig.data_sources()[("aws_iam_policy_document", "fn")]
    sources = " ".join(tfconfig.expr(s) for s in body["source_policy_documents"])
    assert "local.function_policies[each.key]" in sources
    assert "data.aws_iam_policy_document.db_secret.json" in sources
    assert "data.aws_iam_policy_document.logs[each.key].json" in sources
    logs = tfconfig.data_sources()[("aws_iam_policy_document", "logs")]
    (statement,) = tfconfig.blocks(logs, "statement")
    assert set(statement["actions"]) == {"logs:CreateLogStream", "logs:PutLogEvents"}
    assert statement["resources"] == ["${aws_cloudwatch_log_group.fn[each.key].arn}:*"]


def test_no_inline_policy_grants_a_wildcard() -> None:
    for (t, n), body in tfconfig.data_sources().items():
        if t != "aws_iam_policy_document":
            continue
        for statement in tfconfig.blocks(body, "statement"):
            for action in statement.get("actions", []):
                assert "*" not in action, f"{n}: wildcard action {action}"
            for resource in statement.get("resources", []):
                assert tfconfig.expr(resource) != "*", f"{n}: wildcard resource"


def test_vpc_access_comes_from_the_managed_policy() -> None:
    attachment = tfconfig.resources()[("aws_iam_role_policy_attachment", "vpc_access")]
    assert attachment["policy_arn"].endswith("policy/service-role/AWSLambdaVPCAccessExecutionRole")


# --- the shapes the app relies on ----------------------------------------------------


def test_functions_point_at_the_real_handlers() -> None:
    lambda_tf = tfconfig.config()["lambda.tf"]
    functions = lambda_tf["locals"][0]["functions"]
    assert {k: v["handler"] for k, v in functions.items()} == {
        "api": "handlers.api.handler",
        "worker": "handlers.worker.handler",
        "sweeper": "handlers.sweeper.handler",
        "migrate": "handlers.migrate.handler",
    }
    for spec in functions.values():
        module, attr = spec["handler"].rsplit(".", 1)
        source = (tfconfig.ROOT / (module.replace(".", "/") + ".py")).read_text()
        assert re.search(rf"^(def {attr}\(|{attr} = )", source, flags=re.M), spec["handler"]


def test_lambda_uses_the_package_with_its_hash() -> None:
    fn = tfconfig.resources()[("aws_lambda_function", "fn")]
    assert tfconfig.expr(fn["filename"]) == "local.lambda_package"
    assert tfconfig.expr(fn["source_code_hash"]) == "filebase64sha256(local.lambda_package)"
    assert tfconfig.expr(fn["runtime"]) == "var.lambda_runtime"
    assert fn["architectures"] == ["${var.lambda_architecture}"]
    assert tfconfig.blocks(fn, "vpc_config")


def test_event_source_mapping_reports_batch_item_failures() -> None:
    esm = tfconfig.resources()[("aws_lambda_event_source_mapping", "worker")]
    assert esm["function_response_types"] == ["ReportBatchItemFailures"]
    assert tfconfig.expr(esm["event_source_arn"]) == "aws_sqs_queue.source[each.key].arn"
    assert tfconfig.expr(esm["for_each"]) == "local.priorities"
    assert tfconfig.expr(esm["batch_size"]) == "local.batch_size"
    assert "maximum_batching_window_in_seconds" in esm
    (scaling,) = tfconfig.blocks(esm, "scaling_config")
    # Each priority's mapping: its weight's share of var.worker_maximum_concurrency.
    assert (
        tfconfig.expr(scaling["maximum_concurrency"]) == "local.priority_max_concurrency[each.key]"
    )


def test_http_api_is_a_v2_lambda_proxy() -> None:
    api = tfconfig.resources()[("aws_apigatewayv2_api", "http")]
    assert api["protocol_type"] == "HTTP"
    integration = tfconfig.resources()[("aws_apigatewayv2_integration", "api")]
    assert integration["integration_type"] == "AWS_PROXY"
    assert integration["payload_format_version"] == "2.0"


def test_queues_are_encrypted_and_the_dlq_allows_only_our_source() -> None:
    for name in ("source", "dlq"):
        assert tfconfig.resources()[("aws_sqs_queue", name)]["sqs_managed_sse_enabled"] is True
    allow = tfconfig.resources()[("aws_sqs_queue_redrive_allow_policy", "dlq")]
    policy = tfconfig.expr(allow["redrive_allow_policy"])
    assert 'redrivePermission = "byQueue"' in policy
    assert "sourceQueueArns = [aws_sqs_queue.source[each.key].arn]" in policy


def test_database_is_private_and_its_password_is_managed_by_rds() -> None:
    db = tfconfig.resources()[("aws_db_instance", "main")]
    assert db["manage_master_user_password"] is True
    assert "password" not in db
    assert db["publicly_accessible"] is False
    assert db["storage_encrypted"] is True
    assert tfconfig.expr(db["db_subnet_group_name"]) == "aws_db_subnet_group.main.name"
    subnets = tfconfig.resources()[("aws_db_subnet_group", "main")]
    assert tfconfig.expr(subnets["subnet_ids"]) == "aws_subnet.private[*].id"


def test_lambdas_reach_sqs_and_secrets_manager_through_vpc_endpoints() -> None:
    endpoints = tfconfig.resources()[("aws_vpc_endpoint", "interface")]
    assert "sqs" in str(endpoints["for_each"]) and "secretsmanager" in str(endpoints["for_each"])
    assert endpoints["private_dns_enabled"] is True


def test_alarms_watch_dlq_depth_and_the_oldest_message() -> None:
    dlq = tfconfig.resources()[("aws_cloudwatch_metric_alarm", "dlq_depth")]
    assert dlq["metric_name"] == "ApproximateNumberOfMessagesVisible"
    assert dlq["threshold"] == 0 and dlq["comparison_operator"] == "GreaterThanThreshold"
    assert "aws_sqs_queue.dlq[each.key].name" in str(dlq["dimensions"])
    age = tfconfig.resources()[("aws_cloudwatch_metric_alarm", "source_oldest_message")]
    assert age["metric_name"] == "ApproximateAgeOfOldestMessage"
    assert "aws_sqs_queue.source[each.key].name" in str(age["dimensions"])


def test_the_sweeper_runs_every_minute() -> None:
    assert tfconfig.variables()["sweeper_schedule_expression"]["default"] == "rate(1 minute)"
    schedule = tfconfig.resources()[("aws_scheduler_schedule", "sweeper")]
    (target,) = tfconfig.blocks(schedule, "target")
    assert tfconfig.expr(target["arn"]) == 'aws_lambda_function.fn["sweeper"].arn'


# --- who may call the API (infra/README.md, "Authentication") --------------------------

MODES = {"api_key": "NONE", "jwt": "JWT", "lambda": "CUSTOM"}


def test_the_auth_mode_is_a_choice_of_three_and_api_key_by_default() -> None:
    variable = tfconfig.variables()["api_auth_mode"]
    assert variable["default"] == "api_key"
    conditions = [v["condition"] for v in tfconfig.validations("api_auth_mode")]
    assert 'contains(["api_key", "jwt", "lambda"], var.api_auth_mode)' in conditions
    assert set(tfconfig.api_auth_modes()) == set(MODES)


def test_aws_iam_is_gone() -> None:
    # SigV4 takes the Authorization header the app's keys use, and an IAM identity
    # carries no tenant (infra/README.md says so).
    assert "api_authorization_type" not in tfconfig.variables()
    assert "AWS_IAM" not in json.dumps(list(tfconfig.resources().values()))
    assert "AWS_IAM" not in json.dumps(tfconfig.locals_())
    assert "AWS_IAM" in (tfconfig.INFRA / "README.md").read_text()


def test_the_route_takes_its_authorization_from_the_mode() -> None:
    modes = tfconfig.api_auth_modes()
    assert {m: spec["route_authorization_type"] for m, spec in modes.items()} == MODES
    route = tfconfig.resources()[("aws_apigatewayv2_route", "default")]
    assert tfconfig.expr(route["authorization_type"]) == (
        "local.api_auth[var.api_auth_mode].route_authorization_type"
    )
    authorizer = re.sub(r"\s+", " ", tfconfig.expr(route["authorizer_id"]))
    assert 'var.api_auth_mode == "jwt" ? aws_apigatewayv2_authorizer.jwt[0].id' in authorizer
    assert 'var.api_auth_mode == "lambda" ? aws_apigatewayv2_authorizer.lambda[0].id' in authorizer
    assert authorizer.rstrip(")").endswith(": null")


@pytest.mark.parametrize(
    "address",
    [
        ("aws_apigatewayv2_authorizer", "jwt"),
        ("aws_apigatewayv2_authorizer", "lambda"),
        ("aws_lambda_permission", "authorizer"),
    ],
)
def test_each_authorizer_exists_only_for_its_mode(address: tuple[str, str]) -> None:
    mode = "jwt" if address[1] == "jwt" else "lambda"
    body = tfconfig.resources()[address]
    assert tfconfig.expr(body["count"]) == f'var.api_auth_mode == "{mode}" ? 1 : 0'


def test_the_jwt_authorizer_checks_issuer_and_audience() -> None:
    jwt = tfconfig.resources()[("aws_apigatewayv2_authorizer", "jwt")]
    assert jwt["authorizer_type"] == "JWT"
    assert tfconfig.expr(jwt["api_id"]) == "aws_apigatewayv2_api.http.id"
    assert jwt["identity_sources"] == ["$request.header.Authorization"]
    (conf,) = tfconfig.blocks(jwt, "jwt_configuration")
    assert tfconfig.expr(conf["issuer"]) == "var.jwt_issuer"
    assert tfconfig.expr(conf["audience"]) == "var.jwt_audience"


def test_the_lambda_authorizer_is_a_simple_request_authorizer() -> None:
    authorizer = tfconfig.resources()[("aws_apigatewayv2_authorizer", "lambda")]
    assert authorizer["authorizer_type"] == "REQUEST"
    assert authorizer["authorizer_payload_format_version"] == "2.0"
    assert authorizer["enable_simple_responses"] is True
    uri = authorizer["authorizer_uri"]
    assert uri.startswith(
        "arn:${data.aws_partition.current.partition}:apigateway:${var.aws_region}"
    )
    assert uri.endswith(
        ":lambda:path/2015-03-31/functions/${var.lambda_authorizer_function_arn}/invocations"
    )
    permission = tfconfig.resources()[("aws_lambda_permission", "authorizer")]
    assert permission["action"] == "lambda:InvokeFunction"
    assert permission["principal"] == "apigateway.amazonaws.com"
    # Only this API's authorizer may invoke it, not any API Gateway in the account.
    assert permission["source_arn"] == (
        "${aws_apigatewayv2_api.http.execution_arn}/authorizers/"
        "${aws_apigatewayv2_authorizer.lambda[0].id}"
    )
    assert "local.lambda_authorizer_arn_parts" in tfconfig.expr(permission["function_name"])


def test_the_open_route_is_a_documented_checkov_skip() -> None:
    route = tfconfig.resources()[("aws_apigatewayv2_route", "default")]
    assert any(c.startswith("checkov:skip=CKV_AWS_309:") for c in tfconfig.comments(route))
    assert "CKV_AWS_309" in (tfconfig.INFRA / "README.md").read_text()


@pytest.mark.parametrize(
    ("variable", "mode"),
    [
        ("jwt_issuer", "jwt"),
        ("jwt_audience", "jwt"),
        ("lambda_authorizer_function_arn", "lambda"),
    ],
)
def test_a_mode_refuses_to_plan_without_what_it_needs(variable: str, mode: str) -> None:
    checks = tfconfig.validations(variable)
    needs = [v for v in checks if v["condition"].startswith(f'var.api_auth_mode != "{mode}" || ')]
    assert needs, f"{variable} has no validation that api_auth_mode = {mode} needs it"
    assert f'api_auth_mode = "{mode}" needs {variable}' in needs[0]["error_message"]


def test_validations_that_refer_to_other_variables_need_terraform_1_9() -> None:
    crossing = sorted(
        name
        for name in tfconfig.variables()
        for v in tfconfig.validations(name)
        if set(re.findall(r"\bvar\.([a-z0-9_]+)", v["condition"])) - {name}
    )
    assert crossing, "expected the api_auth_mode cross-checks"
    assert tfconfig.required_terraform_version() >= (1, 9, 0), (
        f"{crossing} refer to other variables in validations: that needs Terraform >= 1.9"
    )


def test_the_auth_settings_reach_the_api_function_only() -> None:
    assert "local.api_auth[var.api_auth_mode].env" in tfconfig.function_env("api")
    for function in ("worker", "sweeper", "migrate"):
        assert "api_auth" not in tfconfig.function_env(function)
    common = tfconfig.expr(tfconfig.config()["lambda.tf"]["locals"][0]["common_env"])
    assert "api_auth" not in common and "TASKLEASE_AUTH" not in common


def test_the_terraform_test_plans_every_mode() -> None:
    files = {p.name: p for p in tfconfig.terraform_test_files()}
    assert set(files) == {
        "auth.tftest.hcl",
        "package.tftest.hcl",
        "alerts.tftest.hcl",
        "drain.tftest.hcl",
        "profiles.tftest.hcl",
    }
    text = files["auth.tftest.hcl"].read_text()
    assert 'mock_provider "aws"' in text
    for mode in ("jwt", "lambda"):
        assert re.search(rf'api_auth_mode\s*=\s*"{mode}"', text), f"no run plans {mode}"
    assert re.search(r'api_auth_mode\s*=\s*"AWS_IAM"', text)
    assert "expect_failures" in text


# --- checkov skips -----------------------------------------------------------------------

SKIP = re.compile(r"checkov:skip=(CKV2?_AWS_\d+)(?::(.*))?")


def test_every_checkov_skip_gives_its_reason() -> None:
    skips = []
    for path in tfconfig.tf_files():
        for line in path.read_text().splitlines():
            if "checkov:skip" in line:
                match = SKIP.search(line)
                assert match, f"{path.name}: malformed skip: {line.strip()}"
                reason = (match.group(2) or "").strip()
                assert len(reason) >= 20, f"{path.name}: {match.group(1)} skipped without a reason"
                skips.append(match.group(1))
    assert skips, "expected the documented skips (see infra/README.md)"
