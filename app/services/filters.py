"""The one filter over jobs that search (GET /v1/jobs) and bulk actions (POST /v1/bulk)
share: parsed once, from query parameters or a JSON body, into ``JobFilter``; the store
takes its ``params()``. Every bad value is a BadRequest (400) naming the field."""

from __future__ import annotations

import datetime as dt
import json
import re
import uuid
from collections.abc import Iterable, Mapping
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, ValidationError

from app import errors
from app.settings import bounds
from app.states import JobState
from app.storable import unstorable

# A payload field: dotted keys (``user_id``, ``meta.user``), each a plain name.
FIELD_PART = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
MAX_FIELD_DEPTH = 8
MAX_PAYLOAD_FIELDS = 8
MAX_IDS = 1000
HEX = re.compile(r"^[0-9a-f]{1,32}$")
# Query parameters: payload.<field>=<text> compares with a JSON string;
# payload_json.<field>=<JSON> with any JSON scalar (a number, true, false, null).
PAYLOAD_TEXT = "payload."
PAYLOAD_JSON = "payload_json."

Scalar = str | int | float | bool | None
Text = Annotated[str, StringConstraints(min_length=1, max_length=200)]


class JobFilter(BaseModel):
    """Which jobs: every field given must match (none given: all the scope's jobs)."""

    model_config = ConfigDict(extra="forbid")

    # At least one: an empty list would read as no id filter, every job (a bulk cancel of
    # every job from a selection that was empty).
    ids: list[uuid.UUID] | None = Field(
        None, min_length=1, max_length=MAX_IDS, description="these jobs (one or more)"
    )
    id_prefix: str | None = Field(
        None,
        max_length=36,
        description="a job id or its first hex digits (dashes optional)",
    )
    idempotency_key: Text | None = None
    key: Text | None = Field(
        None,
        description="the jobs of this flow-control key (docs/howto/flow-control.md), "
        "of any kind unless kind is given",
    )
    kind: Annotated[str, StringConstraints(min_length=1, max_length=100)] | None = None
    states: list[JobState] | None = Field(None, max_length=len(JobState))
    tenant: str | None = Field(None, pattern=f"^(?:{bounds.TENANT_PATTERN})$")
    created_after: dt.datetime | None = None
    created_before: dt.datetime | None = None
    finished_after: dt.datetime | None = None
    finished_before: dt.datetime | None = None
    error: Text | None = Field(None, description="last_error contains this text (any case)")
    payload: dict[str, Scalar] | None = Field(
        None,
        description='payload fields equal to these values: {"user_id": "u-42", "meta.n": 3}',
    )

    def check(self) -> JobFilter:
        """The checks pydantic's types do not make; BadRequest naming the field."""
        if self.id_prefix is not None:
            _id_range(self.id_prefix)
        for name in ("idempotency_key", "key", "kind", "error"):
            value = getattr(self, name)
            if value is not None and (bad := unstorable(value)):
                raise errors.BadRequest(f"{name} {bad}")
        for a, b in (("created_after", "created_before"), ("finished_after", "finished_before")):
            for name in (a, b):
                at = getattr(self, name)
                if at is not None and at.tzinfo is None:
                    raise errors.BadRequest(f"{name} needs a time zone (e.g. 2026-01-02T03:04:05Z)")
        if self.payload is not None:
            if not 1 <= len(self.payload) <= MAX_PAYLOAD_FIELDS:
                raise errors.BadRequest(f"payload names 1 to {MAX_PAYLOAD_FIELDS} fields")
            contains(self.payload)
        return self

    def empty(self) -> bool:
        return not self.model_dump(exclude_none=True)

    def canonical(self) -> dict[str, Any]:
        """The filter as JSON (what a bulk operation keeps, what a cursor is signed for)."""
        return self.model_dump(mode="json", exclude_none=True)

    def params(self, *, scope: str | None) -> dict[str, Any]:
        """The store's parameters: ``scope`` is the caller's tenant (None: every tenant),
        narrowed by ``tenant``, which the caller checked it may name."""
        low, high = _id_range(self.id_prefix) if self.id_prefix else (None, None)
        return {
            "tenant": self.tenant or scope,
            "ids": list(self.ids) if self.ids else None,
            "id_low": low,
            "id_high": high,
            "idempotency_key": self.idempotency_key,
            "flow_key": self.key,
            "kind": self.kind,
            "states": [str(s) for s in self.states] if self.states else None,
            "created_after": self.created_after,
            "created_before": self.created_before,
            "finished_after": self.finished_after,
            "finished_before": self.finished_before,
            "error": _like(self.error) if self.error else None,
            "payload": contains(self.payload) if self.payload else None,
        }


def parse(body: Mapping[str, Any]) -> JobFilter:
    """A filter from a JSON body; BadRequest naming the first bad field."""
    try:
        return JobFilter.model_validate(body).check()
    except ValidationError as exc:
        raise errors.BadRequest(_first(exc)) from exc


def payload_fields(query: Iterable[tuple[str, str]]) -> dict[str, Scalar] | None:
    """The payload fields of GET /v1/jobs's query: ``payload.<field>=<text>`` (a JSON
    string) and ``payload_json.<field>=<JSON scalar>``; empty values are ignored."""
    fields: dict[str, Scalar] = {}
    for name, value in query:
        if value == "":
            continue
        if name.startswith(PAYLOAD_TEXT):
            fields[name.removeprefix(PAYLOAD_TEXT)] = value
        elif name.startswith(PAYLOAD_JSON):
            fields[name.removeprefix(PAYLOAD_JSON)] = _json_scalar(name, value)
    return fields or None


def _json_scalar(name: str, value: str) -> Scalar:
    try:
        parsed = json.loads(value)
    except ValueError as exc:
        raise errors.BadRequest(f"{name} is not JSON: {value[:50]!r}") from exc
    if isinstance(parsed, dict | list):
        raise errors.BadRequest(f"{name} must be a JSON scalar (text, number, true, false, null)")
    result: Scalar = parsed
    return result


def contains(fields: Mapping[str, Scalar]) -> dict[str, Any]:
    """``{"a.b": 1, "c": "x"}`` as the document ``payload @>`` tests: ``{"a": {"b": 1},
    "c": "x"}``; BadRequest for a bad field name or two fields that collide."""
    doc: dict[str, Any] = {}
    for path, value in fields.items():
        parts = path.split(".")
        if len(parts) > MAX_FIELD_DEPTH or not all(FIELD_PART.match(p) for p in parts):
            raise errors.BadRequest(
                f"payload field {path[:80]!r} is not a dotted path of names "
                f"(letters, digits, _ and -; at most {MAX_FIELD_DEPTH} deep)"
            )
        if bad := unstorable(value):  # text PostgreSQL refuses; NaN or Infinity (no JSON)
            raise errors.BadRequest(f"payload field {path!r}: the value {bad}")
        node = doc
        for part in parts[:-1]:
            child = node.setdefault(part, {})
            if not isinstance(child, dict):
                raise errors.BadRequest(f"payload field {path!r} collides with another field")
            node = child
        if parts[-1] in node:
            raise errors.BadRequest(f"payload field {path!r} collides with another field")
        node[parts[-1]] = value
    return doc


def _id_range(prefix: str) -> tuple[uuid.UUID, uuid.UUID]:
    """The ids that start with ``prefix``: a range of the primary key."""
    digits = prefix.lower().replace("-", "")
    if not HEX.match(digits):
        raise errors.BadRequest(
            f"id {prefix[:40]!r} is not a job id nor its first hex digits (0-9, a-f, dashes)"
        )
    return uuid.UUID(digits.ljust(32, "0")), uuid.UUID(digits.ljust(32, "f"))


def _like(text: str) -> str:
    """A LIKE pattern matching ``text`` anywhere, its own % and _ taken literally."""
    return "%" + re.sub(r"([\\%_])", r"\\\1", text) + "%"


def _first(exc: ValidationError) -> str:
    err = exc.errors()[0]
    where = ".".join(str(p) for p in err["loc"]) or "filter"
    return f"{where}: {err['msg']}"
