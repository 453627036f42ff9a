"""One source of truth: app/settings/shared_settings.json, the Terraform, and app/settings/config.py agree.

The JSON holds the deployment values the code and the infrastructure share.
Terraform takes its defaults from it (infra/locals.tf); this test fails when a
value, a variable's validation range, or the app's own constraints drift apart.
"""

from __future__ import annotations

import json
import os
import re
import typing
from typing import Any

import annotated_types
import pytest

from app import priorities
from app.demos.triage.settings import TriageSettings
from app.services import auth
from app.settings import aws_limits as limits
from app.settings import config
from tests.infra import tfconfig

pytestmark = pytest.mark.unit

# JSON key -> the app's Settings field that holds the same value.
APP_FIELD = {
    "visibility_timeout_seconds": "visibility_timeout_seconds",
    "worker_timeout_seconds": "function_timeout_seconds",
    "max_attempts": "max_attempts",
    "max_receive_count": "max_receive_count",
    "batch_size": "batch_size",
    "message_retention_seconds": "message_retention_seconds",
    "dlq_retention_seconds": "dlq_retention_seconds",
}
# Deployment values that deliberately differ from app/settings/config.py's local defaults:
# the 6x rule makes a 30 s lease impossible with any useful worker timeout, while
# 30 s keeps local runs and crash tests fast. The functions get the deployment
# value through TASKLEASE_* environment variables (infra/lambda.tf).
DEPLOYMENT_ONLY = {"visibility_timeout_seconds", "worker_timeout_seconds"}

# Terraform resource attribute (or environment variable) -> the local it must use.
WIRING = [
    (("aws_sqs_queue", "source"), "visibility_timeout_seconds", "local.visibility_timeout_seconds"),
    (("aws_sqs_queue", "source"), "message_retention_seconds", "local.message_retention_seconds"),
    (("aws_sqs_queue", "dlq"), "message_retention_seconds", "local.dlq_retention_seconds"),
    (("aws_lambda_event_source_mapping", "worker"), "batch_size", "local.batch_size"),
]
ENV = {
    "TASKLEASE_VISIBILITY_TIMEOUT_SECONDS": "visibility_timeout_seconds",
    "TASKLEASE_MAX_ATTEMPTS": "max_attempts",
    "TASKLEASE_MAX_RECEIVE_COUNT": "max_receive_count",
    "TASKLEASE_BATCH_SIZE": "batch_size",
    "TASKLEASE_MESSAGE_RETENTION_SECONDS": "message_retention_seconds",
    "TASKLEASE_DLQ_RETENTION_SECONDS": "dlq_retention_seconds",
}


@pytest.fixture(scope="module")
def shared() -> dict[str, Any]:
    return tfconfig.shared_settings()


def bounds(field: str) -> tuple[float | None, float | None]:
    """The (ge, le) of a Settings field."""
    found = constraints(field)
    return found.get(">="), found.get("<=")


def constraints(field: str) -> dict[str, float]:
    """A Settings field's numeric bounds by Terraform operator: ">=", ">", "<=", "<"."""
    out: dict[str, float] = {}
    for meta in config.Settings.model_fields[field].metadata:
        for kind, op, attr in (
            (annotated_types.Ge, ">=", "ge"),
            (annotated_types.Gt, ">", "gt"),
            (annotated_types.Le, "<=", "le"),
            (annotated_types.Lt, "<", "lt"),
        ):
            if isinstance(meta, kind):
                out[op] = float(getattr(meta, attr))
    return out


def test_the_json_holds_exactly_the_shared_keys(shared: dict[str, Any]) -> None:
    assert set(shared) == set(APP_FIELD)
    for key, value in shared.items():
        assert isinstance(value, int) and not isinstance(value, bool), f"{key} must be an integer"


# --- JSON vs app/settings/config.py ------------------------------------------------------------


@pytest.mark.parametrize("key", sorted(APP_FIELD))
def test_each_value_is_inside_the_apps_field_constraints(shared: dict[str, Any], key: str) -> None:
    lo, hi = bounds(APP_FIELD[key])
    value = shared[key]
    assert lo is None or value >= lo, f"{key}={value} is below Settings.{APP_FIELD[key]} ge={lo}"
    assert hi is None or value <= hi, f"{key}={value} is above Settings.{APP_FIELD[key]} le={hi}"


def test_the_app_accepts_the_whole_set(
    shared: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    # Through load(), so the model validators (cross-field rules) run too.
    for name in [n for n in os.environ if n.startswith(config.PREFIX)]:
        monkeypatch.delenv(name)
    settings = config.load(**{APP_FIELD[k]: v for k, v in shared.items()})
    assert settings.max_receive_count == shared["max_receive_count"]


def test_the_cross_field_rules_hold(shared: dict[str, Any]) -> None:
    assert shared["max_receive_count"] > shared["max_attempts"]
    assert shared["visibility_timeout_seconds"] <= limits.MAX_VISIBILITY_SECONDS
    assert shared["batch_size"] <= limits.MAX_BATCH
    assert shared["worker_timeout_seconds"] <= limits.MAX_LAMBDA_TIMEOUT_SECONDS
    assert shared["dlq_retention_seconds"] > shared["message_retention_seconds"]
    # https://docs.aws.amazon.com/lambda/latest/dg/services-sqs-configure.html
    assert shared["visibility_timeout_seconds"] >= 6 * shared["worker_timeout_seconds"]


@pytest.mark.parametrize("key", sorted(set(APP_FIELD) - DEPLOYMENT_ONLY))
def test_the_apps_local_defaults_match(shared: dict[str, Any], key: str) -> None:
    default = config.Settings.model_fields[APP_FIELD[key]].default
    assert default == shared[key], (
        f"app/settings/config.py's default for {APP_FIELD[key]} ({default}) drifted from "
        f"app/settings/shared_settings.json ({shared[key]})"
    )


# --- JSON vs Terraform ----------------------------------------------------------------


def test_terraform_reads_the_json() -> None:
    shared_local = tfconfig.expr(tfconfig.locals_()["shared"])
    assert shared_local == 'jsondecode(file("${path.module}/../app/settings/shared_settings.json"))'


@pytest.mark.parametrize("key", sorted(APP_FIELD))
def test_each_shared_variable_defaults_to_the_json(key: str) -> None:
    variable = tfconfig.variables()[key]
    assert variable["default"] is None, f"variable {key} must default to null (the JSON decides)"
    assert tfconfig.expr(tfconfig.locals_()[key]) == (
        f"var.{key} != null ? var.{key} : local.shared.{key}"
    )


@pytest.mark.parametrize(("address", "attribute", "local"), WIRING)
def test_resources_use_the_shared_locals(
    address: tuple[str, str], attribute: str, local: str
) -> None:
    assert tfconfig.expr(tfconfig.resources()[address][attribute]) == local


def test_the_redrive_policy_uses_the_shared_max_receive_count() -> None:
    policy = tfconfig.expr(tfconfig.resources()[("aws_sqs_queue", "source")]["redrive_policy"])
    assert "maxReceiveCount = local.max_receive_count" in policy


def test_the_worker_timeout_is_the_shared_one() -> None:
    functions = tfconfig.config()["lambda.tf"]["locals"][0]["functions"]
    assert tfconfig.expr(functions["worker"]["timeout"]) == "local.worker_timeout_seconds"


def test_the_functions_get_the_same_values_the_queue_has() -> None:
    common = tfconfig.expr(tfconfig.config()["lambda.tf"]["locals"][0]["common_env"])
    for env, key in ENV.items():
        assert re.search(rf"{env} = tostring\(local\.{key}\)", common), f"{env} is not local.{key}"


def _numbers(condition: str, op: str) -> set[float]:
    return {float(n) for n in re.findall(rf"{re.escape(op)} (\d+)", condition)}


@pytest.mark.parametrize("key", sorted(APP_FIELD))
def test_variable_validations_match_the_apps_bounds(key: str) -> None:
    lo, hi = bounds(APP_FIELD[key])
    conditions = " ".join(
        tfconfig.expr(v["condition"])
        for v in tfconfig.blocks(tfconfig.variables()[key], "validation")
    )
    if lo is not None:
        assert lo in _numbers(conditions, ">="), f"{key}: validation lower bound is not {lo}"
    if hi is not None:
        assert hi in _numbers(conditions, "<="), f"{key}: validation upper bound is not {hi}"


def test_the_six_times_rule_is_enforced_at_plan_time() -> None:
    rule = "local.visibility_timeout_seconds >= 6 * local.worker_timeout_seconds"
    for address in [("aws_sqs_queue", "source"), ("aws_lambda_event_source_mapping", "worker")]:
        body = tfconfig.resources()[address]
        conditions = [
            tfconfig.expr(p["condition"])
            for lc in tfconfig.blocks(body, "lifecycle")
            for p in tfconfig.blocks(lc, "precondition")
        ]
        assert rule in conditions, f"{address} lacks the 6x precondition"


def test_the_other_cross_field_rules_are_preconditions_too() -> None:
    body = tfconfig.resources()[("aws_sqs_queue", "source")]
    conditions = {
        tfconfig.expr(p["condition"])
        for lc in tfconfig.blocks(body, "lifecycle")
        for p in tfconfig.blocks(lc, "precondition")
    }
    assert "local.max_receive_count > local.max_attempts" in conditions
    assert "local.dlq_retention_seconds > local.message_retention_seconds" in conditions


def test_the_tfvars_example_repeats_the_json(shared: dict[str, Any]) -> None:
    text = (tfconfig.INFRA / "terraform.tfvars.example").read_text()
    for key, value in shared.items():
        found = re.findall(rf"^#?\s*{key}\s*=\s*(\d+)", text, flags=re.M)
        assert found, f"terraform.tfvars.example does not mention {key}"
        assert [int(v) for v in found] == [value] * len(found), f"{key} drifted in the example"


# --- JSON vs LocalStack ------------------------------------------------------------------


def test_the_localstack_init_hook_reads_the_json() -> None:
    script = (tfconfig.ROOT / "localstack" / "init" / "ready.d" / "create-queues.sh").read_text()
    assert "shared_settings.json" in script
    for key in (
        "visibility_timeout_seconds",
        "message_retention_seconds",
        "dlq_retention_seconds",
        "max_receive_count",
    ):
        assert key in script, f"create-queues.sh does not use {key}"


# --- who may call the API, and the per-tenant limits (infra/README.md, "Authentication") --

# Terraform variable -> the app's Settings field; the API function gets it as TASKLEASE_<FIELD>.
LIMITS = {
    "tenant_rate_limit_per_second": "rate_limit_per_second",
    "tenant_rate_limit_burst": "rate_limit_burst",
    "tenant_max_jobs_in_flight": "max_jobs_in_flight",
    "api_max_body_bytes": "max_body_bytes",
    "tenant_max_running": "max_running_per_tenant",
    "tenant_queue_window_per_slot": "queue_window_per_slot",
}


# Terraform variable -> the app's Settings field; the sweeper function gets it (retention).
RETENTION = {
    "retain_succeeded_seconds": "retain_succeeded_seconds",
    "retain_cancelled_seconds": "retain_cancelled_seconds",
    "retain_dead_lettered_seconds": "retain_dead_lettered_seconds",
    "idempotency_window_seconds": "idempotency_window_seconds",
    "prune_batch_size": "prune_batch_size",
    "prune_batches_per_sweep": "prune_batches_per_sweep",
}


@pytest.mark.parametrize("variable", sorted(RETENTION))
def test_the_retention_settings_reach_the_sweeper_with_the_apps_defaults_and_bounds(
    variable: str,
) -> None:
    field = RETENTION[variable]
    assert tfconfig.variables()[variable]["default"] == config.Settings.model_fields[field].default
    conditions = " ".join(v["condition"] for v in tfconfig.validations(variable))
    for op, bound in constraints(field).items():
        assert bound in _numbers(conditions, op), f"{variable}: validation lacks {op} {bound:g}"
    env = f"TASKLEASE_{field.upper()}"
    pattern = rf"{env}\W+(\$\{{)?tostring\(var\.{variable}\)"
    assert re.search(pattern, tfconfig.function_env("sweeper")), env


def test_every_setting_terraform_names_is_one_the_app_reads() -> None:
    # Environment variables, descriptions and comments alike.
    names: set[str] = set()
    for path in tfconfig.tf_files():
        names |= set(re.findall(r"\bTASKLEASE_[A-Z0-9_]*[A-Z0-9]\b", path.read_text()))
    assert {"TASKLEASE_AUTH_MODE", "TASKLEASE_AUTHORIZER_TENANT_FIELD"} <= names
    for name in sorted(names):
        field = name.removeprefix(config.PREFIX).lower()
        # tasklease's settings, or the demos' own (app/demos/triage/settings.py), which the
        # functions get for when TASKLEASE_KINDS names the demos.
        assert field in config.Settings.model_fields or field in TriageSettings.model_fields, (
            f"{name}: neither app/settings/config.py nor app/demos/triage/settings.py has {field}"
        )


def _mode_env(mode: str, values: dict[str, Any]) -> dict[str, str]:
    """The API function's auth and limit variables in one mode, rendered with values."""
    env = {
        k: tfconfig.render(str(v), values)
        for k, v in tfconfig.api_auth_modes()[mode]["env"].items()
    }
    admin = env.get("TASKLEASE_AUTHORIZER_ADMIN_FIELD", "")
    if admin.startswith("${var.jwt_admin_claim == null"):
        claim = values["jwt_admin_claim"]
        env["TASKLEASE_AUTHORIZER_ADMIN_FIELD"] = "" if claim is None else f"jwt.claims.{claim}"
    for name, variable in re.findall(
        r"(TASKLEASE_[A-Z_]+) = tostring\(var\.([a-z0-9_]+)\)", tfconfig.function_env("api")
    ):
        env[name] = str(values[variable])
    return env


def test_the_modes_tell_the_app_what_it_expects() -> None:
    modes = tfconfig.api_auth_modes()
    allowed = set(typing.get_args(config.Settings.model_fields["auth_mode"].annotation))
    assert {m: spec["env"]["TASKLEASE_AUTH_MODE"] for m, spec in modes.items()} == {
        "api_key": "api_key",
        "jwt": "authorizer",
        "lambda": "authorizer",
    }
    assert {spec["env"]["TASKLEASE_AUTH_MODE"] for spec in modes.values()} <= allowed
    assert set(modes["api_key"]["env"]) == {"TASKLEASE_AUTH_MODE"}
    # A Lambda authorizer's simple response context lands at requestContext.authorizer.lambda:
    # exactly the app's defaults.
    fields = config.Settings.model_fields
    assert modes["lambda"]["env"]["TASKLEASE_AUTHORIZER_TENANT_FIELD"] == (
        fields["authorizer_tenant_field"].default
    )
    assert modes["lambda"]["env"]["TASKLEASE_AUTHORIZER_ADMIN_FIELD"] == (
        fields["authorizer_admin_field"].default
    )
    # A JWT authorizer's claims land at requestContext.authorizer.jwt.claims.
    jwt = modes["jwt"]["env"]
    assert jwt["TASKLEASE_AUTHORIZER_TENANT_FIELD"] == "jwt.claims.${var.jwt_tenant_claim}"
    assert "jwt.claims.${var.jwt_admin_claim}" in jwt["TASKLEASE_AUTHORIZER_ADMIN_FIELD"]


# What each authorizer puts under requestContext.authorizer in a payload 2.0 event
# (https://docs.aws.amazon.com/apigateway/latest/developerguide/http-api-develop-integrations-lambda.html).
# JWT claims arrive as strings.
AUTHORIZER_CONTEXT: dict[str, Any] = {
    "jwt": {"jwt": {"claims": {"tenant": "acme", "tasklease_admin": "true"}, "scopes": None}},
    "lambda": {"lambda": {"tenant": "acme", "admin": True}},
}


@pytest.mark.parametrize("mode", ["api_key", "jwt", "lambda"])
def test_the_app_starts_with_each_modes_environment(
    mode: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in [n for n in os.environ if n.startswith(config.PREFIX)]:
        monkeypatch.delenv(name)
    env = _mode_env(mode, tfconfig.defaults())
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    settings = config.load()
    assert settings.auth_mode == env["TASKLEASE_AUTH_MODE"]
    for variable, field in LIMITS.items():
        assert getattr(settings, field) == tfconfig.defaults()[variable]
    if mode == "api_key":
        return
    # The identity the authorizer would hand over is the caller the app sees.
    event = json.loads((tfconfig.ROOT / "tests" / "events" / "apigw_v2_post_job.json").read_text())
    event["requestContext"]["authorizer"] = AUTHORIZER_CONTEXT[mode]
    caller = auth.from_authorizer(
        event,
        tenant_field=settings.authorizer_tenant_field,
        admin_field=settings.authorizer_admin_field,
    )
    assert (caller.tenant, caller.admin, caller.via) == ("acme", True, "authorizer")


def test_a_jwt_deployment_without_an_admin_claim_has_no_admins(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for name in [n for n in os.environ if n.startswith(config.PREFIX)]:
        monkeypatch.delenv(name)
    env = _mode_env("jwt", {**tfconfig.defaults(), "jwt_admin_claim": None})
    assert env["TASKLEASE_AUTHORIZER_ADMIN_FIELD"] == ""
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    settings = config.load()
    event = {"requestContext": {"authorizer": AUTHORIZER_CONTEXT["jwt"]}}
    caller = auth.from_authorizer(
        event,
        tenant_field=settings.authorizer_tenant_field,
        admin_field=settings.authorizer_admin_field,
    )
    assert (caller.tenant, caller.admin) == ("acme", False)


@pytest.mark.parametrize("variable", sorted(LIMITS))
def test_the_limit_defaults_are_the_apps(variable: str) -> None:
    field = LIMITS[variable]
    assert (
        tfconfig.variables()[variable]["default"] == config.Settings.model_fields[field].default
    ), f"variable {variable}'s default drifted from app/settings/config.py's {field}"


@pytest.mark.parametrize("variable", sorted(LIMITS))
def test_the_limit_validations_match_the_apps_bounds(variable: str) -> None:
    conditions = " ".join(v["condition"] for v in tfconfig.validations(variable))
    found = constraints(LIMITS[variable])
    assert found, f"Settings.{LIMITS[variable]} has no bounds"
    for op, bound in found.items():
        assert bound in _numbers(conditions, op), f"{variable}: validation lacks {op} {bound:g}"


@pytest.mark.parametrize("variable", sorted(LIMITS))
def test_the_limits_reach_the_api_function(variable: str) -> None:
    env = f"TASKLEASE_{LIMITS[variable].upper()}"
    assert f"{env} = tostring(var.{variable})" in tfconfig.function_env("api")


def test_the_tfvars_example_repeats_the_limit_defaults() -> None:
    text = (tfconfig.INFRA / "terraform.tfvars.example").read_text()
    for variable in LIMITS:
        found = re.findall(rf"^#?\s*{variable}\s*=\s*([\d.]+)", text, flags=re.M)
        assert found, f"terraform.tfvars.example does not mention {variable}"
        default = tfconfig.variables()[variable]["default"]
        assert [float(v) for v in found] == [default] * len(found), f"{variable} drifted"


# --- priorities: a queue, a DLQ and an event source mapping per priority -------------------

PER_PRIORITY = [
    ("aws_sqs_queue", "source"),
    ("aws_sqs_queue", "dlq"),
    ("aws_sqs_queue_redrive_allow_policy", "dlq"),
    ("aws_lambda_event_source_mapping", "worker"),
    ("aws_cloudwatch_metric_alarm", "dlq_depth"),
    ("aws_cloudwatch_metric_alarm", "source_oldest_message"),
]


def test_each_priority_has_its_queue_dlq_redrive_and_mapping() -> None:
    names = tfconfig.expr(tfconfig.locals_()["priorities"])
    assert 'for p in ["high", "normal", "low"]' in names
    assert {"high", "normal", "low"} == {p.value for p in priorities.Priority}
    for address in PER_PRIORITY:
        body = tfconfig.resources()[address]
        assert tfconfig.expr(body["for_each"]) == "local.priorities", (
            f"{address} is not per priority"
        )
    source = tfconfig.resources()[("aws_sqs_queue", "source")]
    assert "deadLetterTargetArn = aws_sqs_queue.dlq[each.key].arn" in tfconfig.expr(
        source["redrive_policy"]
    )


def test_the_queue_names_are_the_apps() -> None:
    # app/transport/sqs.py create_queues: NAME, NAME-high, NAME-low, each with "-dlq".
    names = tfconfig.expr(tfconfig.locals_()["priorities"])
    assert 'queue_name = p == "normal" ? local.queue_name : "${local.queue_name}-${p}"' in names
    assert 'dlq_name = p == "normal" ? local.dlq_name : "${local.queue_name}-${p}-dlq"' in names
    assert tfconfig.expr(tfconfig.locals_()["dlq_name"]) == "${var.name}-jobs-dlq"


def test_the_weights_default_to_the_apps() -> None:
    variable = tfconfig.variables()["priority_weights"]
    app = config.Settings.model_fields["priority_weights"].default
    assert variable["default"] == {p.value: w for p, w in priorities.parse_weights(app).items()}
    conditions = " ".join(v["condition"] for v in tfconfig.validations("priority_weights"))
    assert 1 in _numbers(conditions, ">=") and priorities.MAX_WEIGHT in _numbers(conditions, "<=")


def _max_concurrency(total: int, weights: dict[str, int]) -> dict[str, int]:
    """locals.tf's priority_max_concurrency, in Python."""
    return {p: max(2, total * w // sum(weights.values())) for p, w in weights.items()}


def test_each_mappings_concurrency_follows_its_weight() -> None:
    share = tfconfig.expr(tfconfig.locals_()["priority_max_concurrency"])
    assert (
        "max(2, floor(var.worker_maximum_concurrency * var.priority_weights[p] "
        "/ local.priority_weight_total))"
    ) in share
    (scaling,) = tfconfig.blocks(
        tfconfig.resources()[("aws_lambda_event_source_mapping", "worker")], "scaling_config"
    )
    assert (
        tfconfig.expr(scaling["maximum_concurrency"]) == "local.priority_max_concurrency[each.key]"
    )
    defaults = tfconfig.defaults()
    found = _max_concurrency(defaults["worker_maximum_concurrency"], defaults["priority_weights"])
    assert found == {"high": 6, "normal": 3, "low": 2}  # AWS's minimum is 2


def test_the_functions_know_every_queue_and_the_weights() -> None:
    common = tfconfig.expr(tfconfig.config()["lambda.tf"]["locals"][0]["common_env"])
    for p, suffix in (("normal", ""), ("high", "_HIGH"), ("low", "_LOW")):
        assert f'TASKLEASE_QUEUE_URL{suffix} = aws_sqs_queue.source["{p}"].url' in common
        assert f'TASKLEASE_DLQ_URL{suffix} = aws_sqs_queue.dlq["{p}"].url' in common
    assert "TASKLEASE_PRIORITY_WEIGHTS = local.priority_weights_setting" in common
    setting = tfconfig.expr(tfconfig.locals_()["priority_weights_setting"])
    assert setting == (
        'join(",", [for p in ["high", "normal", "low"] : "${p}=${var.priority_weights[p]}"])'
    )
    rendered = ",".join(f"{p}={w}" for p, w in tfconfig.defaults()["priority_weights"].items())
    assert config.load(priority_weights=rendered).weights == config.load().weights


def test_a_deployment_from_before_priorities_keeps_its_queues_as_the_normal_ones() -> None:
    moved = {
        (tfconfig.expr(m["from"]), tfconfig.expr(m["to"]))
        for doc in tfconfig.config().values()
        for m in doc.get("moved", [])
    }
    for kind, name in PER_PRIORITY:
        assert (f"{kind}.{name}", f'{kind}.{name}["normal"]') in moved, f"{kind}.{name}"
