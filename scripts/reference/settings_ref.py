"""The settings reference (the site's reference/settings.md, generated at build): every field of
the settings model with its environment variable, type, default, bounds and description,
read from the model itself so the page cannot drift from the code."""

from __future__ import annotations

import importlib
import inspect
import re
import types
import typing
from typing import Any

from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined
from tables import cell

# The models the page lists: tasklease's settings, then the demos' own (read only by the
# demo kinds, app.demos, which `make run` loads).
MODELS = (
    ("app.settings.config", "Settings", ""),
    ("app.demos.triage.settings", "TriageSettings", "The demos' settings"),
)

BOUNDS = {"Ge": "≥", "Gt": ">", "Le": "≤", "Lt": "<"}
LENGTHS = {
    "MinLen": ("min_length", "at least {} characters"),
    "MaxLen": ("max_length", "at most {} characters"),
}
DURATIONS = ((86_400, "day"), (3_600, "hour"), (60, "minute"))


def models() -> list[tuple[type[Any], str]]:
    """Each settings class the page lists, with its section title."""
    return [(getattr(importlib.import_module(m), c), title) for m, c, title in MODELS]


def ordered_fields(model: type[Any]) -> list[tuple[str, FieldInfo]]:
    """The model's own fields in source order, then those it inherits."""
    fields: dict[str, FieldInfo] = model.model_fields
    own = [n for n in inspect.get_annotations(model) if n in fields]
    return [(n, fields[n]) for n in own] + [(n, f) for n, f in fields.items() if n not in own]


def env_name(model: type[Any], name: str) -> str:
    return str(model.model_config.get("env_prefix", "")) + name.upper()


def type_text(annotation: Any) -> str:
    """A type as a reader writes it: ``int``, ``str | None``, ``"sqs" | "redis"``."""
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if origin is typing.Annotated:
        return type_text(args[0])
    if origin is typing.Literal:
        return " | ".join(f'"{a}"' if isinstance(a, str) else repr(a) for a in args)
    if origin in (typing.Union, types.UnionType):
        return " | ".join(type_text(a) for a in args)
    if annotation is type(None):
        return "None"
    if origin is not None:
        name = getattr(origin, "__name__", str(origin))
        return f"{name}[{', '.join(type_text(a) for a in args)}]"
    return getattr(annotation, "__name__", str(annotation))


def duration(seconds: float) -> str:
    """``86400`` -> ``1 day``; empty when it is not a round number of a unit."""
    for size, unit in DURATIONS:
        if seconds >= size and seconds % size == 0:
            n = int(seconds // size)
            return f"{n} {unit}{'s' if n != 1 else ''}"
    return ""


def default_text(name: str, field: FieldInfo) -> str:
    if field.default_factory is not None:
        factory = field.default_factory
        if factory in (dict, list):
            return f"`{factory()!r}`"
        return "computed at start-up"
    value = field.default
    if value is PydanticUndefined:
        return "required"
    if value is None:
        return "unset"
    if isinstance(value, bool):
        return f"`{str(value).lower()}`"
    if isinstance(value, str):
        return f"`{value}`" if value else '`""` (empty)'
    text = f"`{value}`"
    if name.endswith("_seconds") and isinstance(value, int | float) and value:
        human = duration(value)
        if human:
            text += f" ({human})"
    return text


def bounds_text(field: FieldInfo) -> str:
    parts: list[str] = []
    for meta in field.metadata:
        kind = type(meta).__name__
        if kind in BOUNDS:
            parts.append(f"{BOUNDS[kind]} {getattr(meta, kind.lower())}")
        elif kind in LENGTHS:
            attr, text = LENGTHS[kind]
            parts.append(text.format(getattr(meta, attr)))
    return ", ".join(parts)


def sentence(text: str) -> str:
    """A description as a table cell reads it: capitalised."""
    return text[:1].upper() + text[1:]


def linked(text: str, known: set[str]) -> str:
    """Each setting a description names links to its row."""
    return re.sub(
        r"\bTASKLEASE_[A-Z0-9_]+\b",
        lambda m: f"[`{m[0]}`](#{m[0].lower()})" if m[0] in known else m[0],
        text,
    )


def table(model: type[Any], known: set[str]) -> list[str]:
    """One row per setting; the type cell also says the bounds."""
    lines = [
        '<div class="tl-settings" markdown>',
        "",
        "| Variable | Type | Default | Description |",
        "| --- | --- | --- | --- |",
    ]
    for name, field in ordered_fields(model):
        var = env_name(model, name)
        kind = f"`{type_text(field.annotation)}`"
        bounds = bounds_text(field)
        lines.append(
            f'| <span id="{var.lower()}"></span>`{var}` '
            f"| {cell(kind)}{'<br>' + cell(bounds) if bounds else ''} "
            f"| {cell(default_text(name, field))} "
            f"| {linked(cell(sentence(field.description or '')), known)} |"
        )
    return [*lines, "", "</div>", ""]


def module_doc(model: type[Any]) -> list[str]:
    """The model's module docstring, folded away under the table's heading."""
    doc = (importlib.import_module(model.__module__).__doc__ or "").strip()
    if not doc:
        return []
    lines = [f'??? info "`{model.__module__}`"', ""]
    lines += [f"    {line}".rstrip() for line in doc.splitlines()]
    return [*lines, ""]


def render() -> str:
    lines = [
        # The table wants the width the page's table of contents would take.
        "---",
        "hide:",
        "  - toc",
        "---",
        "",
        "# Settings",
        "",
        "Every setting is an environment variable: `TASKLEASE_` and the field's name in",
        "capitals. A value out of its bounds, of the wrong type or inconsistent with another",
        "setting stops start-up with a message that names the variable. Settings that hold",
        "JSON (`TASKLEASE_MODEL_BUDGETS`, `TASKLEASE_MODEL_PRICES`) take a JSON object.",
        "",
        "This page is generated from the settings models when the site is built, so it",
        "lists exactly the settings the code reads.",
        "",
    ]
    for model, title in models():
        if title:
            lines += [f"## {title}", ""]
        lines += [f"From `{model.__module__}.{model.__name__}`.", ""]
        lines += module_doc(model)
        lines += table(model, set(names()))
    return "\n".join(lines)


def names() -> list[str]:
    """Every environment variable the page lists, for the drift test."""
    return [env_name(m, n) for m, _ in models() for n, _ in ordered_fields(m)]
