"""The bounds are defined once (app/settings/bounds.py): the SQL CHECKs, the settings and the
API's OpenAPI schema agree with them."""

from __future__ import annotations

import re

import pytest

from app import errors
from app.api import create_app
from app.kinds import kind
from app.settings import bounds, config
from app.states import FINAL_FOR_NOW, TERMINAL, JobState
from app.store import sql

pytestmark = pytest.mark.unit

SCHEMA = "\n".join(body for _, body in sql.migrations())


def check_between(column: str) -> tuple[int, int]:
    m = re.search(rf"\b{column}\b[^\n]*CHECK \({column} BETWEEN (\d+) AND (\d+)\)", SCHEMA)
    assert m, f"no BETWEEN check on {column}"
    return int(m.group(1)), int(m.group(2))


def test_the_jobs_checks_are_the_bounds() -> None:
    assert check_between("max_attempts") == (bounds.MIN_ATTEMPTS, bounds.MAX_ATTEMPTS)
    assert check_between("timeout_seconds") == (
        bounds.MIN_TIMEOUT_SECONDS,
        bounds.MAX_TIMEOUT_SECONDS,
    )


def test_the_effect_key_check_is_the_bound() -> None:
    assert f"length(key) BETWEEN 1 AND {bounds.MAX_EFFECT_KEY_CHARS}" in SCHEMA


def test_the_state_checks_are_the_bounds() -> None:
    assert f"length(key) BETWEEN 1 AND {bounds.MAX_STATE_KEY_CHARS}" in SCHEMA
    # The value's bytes as jsonb prints it (spaces added): a backstop above the bound.
    limit = int(re.search(r"octet_length\(value::text\) <= (\d+)", SCHEMA).group(1))  # type: ignore[union-attr]
    assert limit >= 2 * bounds.MAX_STATE_VALUE_BYTES


def test_the_api_key_checks_are_the_bounds() -> None:
    assert f"tenant ~ '^{bounds.TENANT_PATTERN}$'" in SCHEMA
    assert f"length(name) <= {bounds.MAX_KEY_NAME_CHARS}" in SCHEMA


def test_the_attempts_setting_has_the_same_range() -> None:
    meta = {type(m).__name__: m for m in config.Settings.model_fields["max_attempts"].metadata}
    assert meta["Ge"].ge == bounds.MIN_ATTEMPTS
    assert meta["Le"].le == bounds.MAX_ATTEMPTS


def test_the_openapi_document_states_the_same_bounds() -> None:
    settings = config.load(
        database_url="postgresql://u@127.0.0.1:9/d",
        queue_url="http://127.0.0.1:9/q",
        dlq_url="http://127.0.0.1:9/d",
    )
    doc = create_app(settings).openapi()
    job = doc["components"]["schemas"]["JobCreate"]["properties"]
    attempts = job["max_attempts"]["anyOf"][0]
    timeout = job["timeout_seconds"]["anyOf"][0]
    assert (attempts["minimum"], attempts["maximum"]) == (bounds.MIN_ATTEMPTS, bounds.MAX_ATTEMPTS)
    assert (timeout["minimum"], timeout["maximum"]) == (
        bounds.MIN_TIMEOUT_SECONDS,
        bounds.MAX_TIMEOUT_SECONDS,
    )


@pytest.mark.parametrize(
    "options",
    [
        {"max_attempts": bounds.MAX_ATTEMPTS + 1},
        {"max_attempts": 0},
        {"timeout_seconds": bounds.MAX_TIMEOUT_SECONDS + 1},
    ],
)
def test_a_kind_declared_outside_the_bounds_stops_start_up(options: dict[str, int]) -> None:
    with pytest.raises(errors.ConfigError, match="outside"):
        kind("tests.out_of_bounds", **options)  # type: ignore[arg-type]


def test_the_state_enum_in_sql_is_jobstate() -> None:
    m = re.search(r"CREATE TYPE job_state AS ENUM \((.*?)\);", SCHEMA, flags=re.S)
    assert m, "no job_state enum in the migrations"
    states = re.findall(r"'(\w+)'", m.group(1))
    # Later migrations add values: ALTER TYPE job_state ADD VALUE ... 'new' BEFORE 'old'.
    for new, before in re.findall(
        r"ALTER TYPE job_state ADD VALUE (?:IF NOT EXISTS )?'(\w+)' BEFORE '(\w+)'", SCHEMA
    ):
        states.insert(states.index(before), new)
    assert states == [s.value for s in JobState]
    assert TERMINAL < FINAL_FOR_NOW  # dead_lettered is final for now, not terminal
    assert {JobState.DEAD_LETTERED} == FINAL_FOR_NOW - TERMINAL
