"""The HTTP API reference (the site's reference/http-api.md, generated at build): every path and
method of the API's OpenAPI document, with its parameters, request body and answers, and
every schema they name, as Markdown tables. The document is the one the API serves at
/openapi.json, built from the app itself, so the page cannot drift from the routes."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
from collections.abc import Iterator
from typing import Any

from tables import cell, plain

METHODS = ("get", "head", "post", "put", "patch", "delete")
# Placeholder endpoints: building the app opens nothing, it only needs them set.
BUILD_SETTINGS = {
    "database_url": "postgresql://docs@127.0.0.1:9/docs",
    "queue_url": "http://127.0.0.1:9/queue",
    "dlq_url": "http://127.0.0.1:9/dlq",
}
CONSTRAINTS = {
    "minimum": ">= {}",
    "exclusiveMinimum": "> {}",
    "maximum": "<= {}",
    "exclusiveMaximum": "< {}",
    "minLength": "at least {} character(s)",
    "maxLength": "at most {} character(s)",
    "minItems": "at least {} item(s)",
    "maxItems": "at most {} item(s)",
    "pattern": "matches `{}`",
}
GROUPS = {
    "jobs": "Jobs",
    "stream": "Streams",
    "overview": "Overview",
    "callbacks": "Callbacks",
    "dead-letters": "Dead letters",
    "schedules": "Schedules",
    "me": "Who is calling",
    "usage": "Usage",
}


@contextlib.contextmanager
def clean_environment() -> Iterator[None]:
    """No TASKLEASE_* or OTEL_* variable of the shell that builds the docs reaches the app."""
    saved = {k: v for k, v in os.environ.items() if k.startswith(("TASKLEASE_", "OTEL_"))}
    for key in saved:
        del os.environ[key]
    try:
        yield
    finally:
        os.environ.update(saved)


def openapi() -> dict[str, Any]:
    """The API's OpenAPI document, as `GET /openapi.json` serves it."""
    from app.api.app import create_app
    from app.settings import config

    # Warnings of a process that starts are not the build's: "no job kinds" is true here.
    logging.disable(logging.WARNING)
    try:
        with clean_environment():
            settings = config.load(**BUILD_SETTINGS)
            document: dict[str, Any] = create_app(settings).openapi()
    finally:
        logging.disable(logging.NOTSET)
    return document


def schema_anchor(name: str) -> str:
    return "schema-" + re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")


def operation_anchor(method: str, path: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", f"{method} {path}".lower()).strip("-")


def type_of(schema: dict[str, Any]) -> str:
    """A schema's type in words, with links to the named schemas."""
    if "$ref" in schema:
        name = schema["$ref"].rsplit("/", 1)[-1]
        return f"[{name}](#{schema_anchor(name)})"
    if "anyOf" in schema or "oneOf" in schema:
        return " or ".join(type_of(s) for s in schema.get("anyOf", schema.get("oneOf", [])))
    if "enum" in schema:
        return " or ".join(f"`{json.dumps(v)}`" for v in schema["enum"])
    if "const" in schema:
        return f"`{json.dumps(schema['const'])}`"
    kind = schema.get("type")
    if kind == "array":
        return f"array of {type_of(schema.get('items', {}))}"
    if kind == "object" or (kind is None and "additionalProperties" in schema):
        values = schema.get("additionalProperties")
        if isinstance(values, dict) and values:
            return f"object of {type_of(values)}"
        return "object"
    if kind is None:
        return "any"
    return f"{kind} ({schema['format']})" if "format" in schema else str(kind)


def constraints(schema: dict[str, Any]) -> list[str]:
    found = []
    for option in schema.get("anyOf", [schema]):
        for key, text in CONSTRAINTS.items():
            if key in option:
                value = option[key]
                if isinstance(value, float) and value.is_integer():
                    value = int(value)
                text = text.format(value)
                if "(s)" in text:
                    text = text.replace("(s)", "" if value == 1 else "s")
                found.append(text)
    return found


def about(schema: dict[str, Any], required: bool = False, description: str = "") -> str:
    """Description, default and constraints of a field or parameter, in one cell."""
    parts = [description or schema.get("description", "")]
    parts += constraints(schema)
    if "default" in schema and not required:
        parts.append(f"default `{json.dumps(schema['default'])}`")
    return cell("; ".join(p for p in parts if p))


def operation(method: str, path: str, op: dict[str, Any]) -> list[str]:
    title = f"### `{method.upper()} {path}` {{ #{operation_anchor(method, path)} }}"
    lines = [title, "", f"**{op.get('summary', '')}**", ""]
    if op.get("description"):
        lines += [plain(op["description"].strip()), ""]
    schemes = [name for rule in op.get("security", []) for name in rule]
    auth = ", ".join(f"[{name}](#authentication)" for name in schemes) or "none"
    lines += [f"Authentication: {auth}.", ""]
    params = op.get("parameters", [])
    if params:
        lines += [
            "| Parameter | In | Type | Required | Description |",
            "| --- | --- | --- | --- | --- |",
        ]
        for p in params:
            schema = p.get("schema", {})
            description = about(schema, description=p.get("description", ""))
            required = "yes" if p.get("required") else "no"
            lines.append(
                f"| `{p['name']}` | {p['in']} | {cell(type_of(schema))} | {required} | {description} |"
            )
        lines.append("")
    body = op.get("requestBody")
    if body:
        for media, content in body.get("content", {}).items():
            kind = type_of(content.get("schema", {}))
            lines += [f"Request body ({media}): {kind}.", ""]
    lines += ["| Status | Answer | Body |", "| --- | --- | --- |"]
    for status, answer in sorted(op.get("responses", {}).items()):
        bodies = [
            f"{type_of(c['schema'])} ({media})" if c.get("schema") else media
            for media, c in answer.get("content", {}).items()
        ]
        lines.append(
            f"| {status} | {cell(answer.get('description', ''))} | {cell(', '.join(bodies))} |"
        )
    return [*lines, ""]


def schema_section(name: str, schema: dict[str, Any]) -> list[str]:
    lines = [f"### {name} {{ #{schema_anchor(name)} }}", ""]
    if schema.get("description"):
        lines += [plain(schema["description"].strip()), ""]
    if "enum" in schema:
        values = ", ".join(f"`{v}`" for v in schema["enum"])
        return [*lines, f"One of: {values}.", ""]
    required = set(schema.get("required", []))
    lines += ["| Field | Type | Required | Description |", "| --- | --- | --- | --- |"]
    for field, sub in schema.get("properties", {}).items():
        need = field in required
        lines.append(
            f"| `{field}` | {cell(type_of(sub))} | {'yes' if need else 'no'} | {about(sub, need)} |"
        )
    return [*lines, ""]


def group_of(path: str) -> str:
    parts = path.strip("/").split("/")
    if parts[0] != "v1":
        return "Health"
    return GROUPS.get(parts[1], parts[1].replace("-", " ").capitalize())


def render(document: dict[str, Any] | None = None) -> str:
    doc = document or openapi()
    info = doc.get("info", {})
    lines = [
        "# HTTP API",
        "",
        f"{info.get('summary', '')} Version {info.get('version', '')}, OpenAPI {doc['openapi']}.",
        "",
        "Generated from the API's OpenAPI document when the site is built (the same",
        "document a running API serves at `/openapi.json`, with Swagger UI at `/docs`);",
        "download it as [openapi.json](openapi.json). Errors are answered as a",
        f"[Problem](#{schema_anchor('Problem')}) body.",
        "",
    ]
    schemes = doc.get("components", {}).get("securitySchemes", {})
    lines += ["## Authentication", "", "| Scheme | Type | What it is |", "| --- | --- | --- |"]
    for name, scheme in schemes.items():
        kind = " ".join(str(scheme.get(k, "")) for k in ("type", "scheme")).strip()
        lines.append(f"| `{name}` | {cell(kind)} | {cell(scheme.get('description', ''))} |")
    lines.append("")
    ops: dict[str, list[tuple[str, str, dict[str, Any]]]] = {}
    for path, item in doc["paths"].items():
        for method in METHODS:
            if method in item:
                ops.setdefault(group_of(path), []).append((method, path, item[method]))
    lines += ["## Endpoints", "", "| Method | Path | What it does |", "| --- | --- | --- |"]
    for entries in ops.values():
        for method, path, op in entries:
            target = operation_anchor(method, path)
            lines.append(
                f"| {method.upper()} | [`{path}`](#{target}) | {cell(op.get('summary', ''))} |"
            )
    lines.append("")
    for group, entries in ops.items():
        lines += [f"## {group}", ""]
        for method, path, op in entries:
            lines += operation(method, path, op)
    lines += ["## Schemas", ""]
    for name, schema in doc.get("components", {}).get("schemas", {}).items():
        lines += schema_section(name, schema)
    return "\n".join(lines) + "\n"


def openapi_json(document: dict[str, Any]) -> str:
    return json.dumps(document, indent=2, sort_keys=False) + "\n"
