"""infra/*.tf parsed with python-hcl2, and small lookups over it (tests/infra only)."""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import hcl2

ROOT = Path(__file__).resolve().parents[2]
INFRA = ROOT / "infra"
SHARED_SETTINGS = ROOT / "app" / "settings" / "shared_settings.json"

# `aws_sqs_queue.source`, `data.aws_iam_policy_document.api`, `aws_lambda_function.fn["api"]`
REF = re.compile(r"(?<![\w.])(data\.)?(aws_[a-z0-9_]+)\.([a-z0-9_]+)")


def tf_files() -> list[Path]:
    return sorted(INFRA.glob("*.tf"))


def parse(path: Path) -> dict[str, Any]:
    options = hcl2.SerializationOptions(strip_string_quotes=True, with_comments=True)
    with path.open() as f:
        return hcl2.load(f, serialization_options=options)


@functools.cache
def config() -> dict[str, dict[str, Any]]:
    """Every .tf file in infra/, parsed: {file name: document}."""
    return {p.name: parse(p) for p in tf_files()}


def shared_settings() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(SHARED_SETTINGS.read_text())
    return {k: v for k, v in data.items() if not k.startswith("_")}


def _labelled(kind: str) -> Iterator[tuple[str, str, dict[str, Any]]]:
    for doc in config().values():
        for block in doc.get(kind, []):
            for type_, named in block.items():
                for name, body in named.items():
                    yield type_, name, body


def resources() -> dict[tuple[str, str], dict[str, Any]]:
    return {(t, n): b for t, n, b in _labelled("resource")}


def data_sources() -> dict[tuple[str, str], dict[str, Any]]:
    return {(t, n): b for t, n, b in _labelled("data")}


def variables() -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    for doc in config().values():
        for block in doc.get("variable", []):
            for name, body in block.items():
                out[name] = body
    return out


def locals_() -> dict[str, Any]:
    out: dict[str, Any] = {}
    for doc in config().values():
        for block in doc.get("locals", []):
            out.update({k: v for k, v in block.items() if not k.startswith("__")})
    return out


def expr(value: Any) -> str:
    """An attribute's expression without the ${...} wrapper."""
    text = str(value)
    return text[2:-1] if text.startswith("${") and text.endswith("}") else text


def refs(value: Any) -> set[tuple[bool, str, str]]:
    """(is_data, type, name) of every resource or data source an expression mentions."""
    text = json.dumps(value)
    return {(bool(d), t, n) for d, t, n in REF.findall(text)}


def blocks(body: dict[str, Any], name: str) -> list[dict[str, Any]]:
    found = body.get(name, [])
    return found if isinstance(found, list) else [found]


def comments(body: Any) -> list[str]:
    """Every comment inside a block, nested blocks included."""
    out: list[str] = []
    if isinstance(body, dict):
        for key, value in body.items():
            if key == "__comments__":
                out.extend(c["value"] for c in value)
            else:
                out.extend(comments(value))
    elif isinstance(body, list):
        for item in body:
            out.extend(comments(item))
    return out


def validations(variable: str) -> list[dict[str, Any]]:
    """A variable's validation blocks, their conditions without the ${...} wrapper."""
    return [
        {**v, "condition": expr(v["condition"])}
        for v in blocks(variables()[variable], "validation")
    ]


def function_env(function: str) -> str:
    """The expression of one function's own environment (infra/lambda.tf local.functions)."""
    functions = config()["lambda.tf"]["locals"][0]["functions"]
    return expr(functions[function]["env"])


def api_auth_modes() -> dict[str, dict[str, Any]]:
    """local.api_auth (infra/apigateway.tf): per api_auth_mode, the route's authorization
    and the environment the API function gets."""
    modes: dict[str, dict[str, Any]] = locals_()["api_auth"]
    return modes


def render(value: str, values: dict[str, Any]) -> str:
    """A string with ${var.NAME} interpolations filled in from values (e.g. the defaults)."""
    return re.sub(r"\$\{var\.([a-z0-9_]+)\}", lambda m: str(values[m.group(1)]), value)


def defaults() -> dict[str, Any]:
    return {name: body.get("default") for name, body in variables().items()}


def required_terraform_version() -> tuple[int, ...]:
    """The minimum of versions.tf's `required_version = ">= X.Y.Z"`."""
    for doc in config().values():
        for block in doc.get("terraform", []):
            if "required_version" in block:
                found = re.fullmatch(r">=\s*([\d.]+)", block["required_version"].strip())
                assert found, f"required_version {block['required_version']!r} is not '>= X.Y.Z'"
                return tuple(int(p) for p in found.group(1).split("."))
    raise AssertionError("versions.tf declares no required_version")


def terraform_test_files() -> list[Path]:
    return sorted((INFRA / "tests").glob("*.tftest.hcl"))
