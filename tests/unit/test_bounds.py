"""The bounds are defined once (app/bounds.py): the SQL CHECKs, the settings and the
API's OpenAPI schema agree with them."""

from __future__ import annotations

import re

import pytest

from app import bounds, config
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


def test_the_api_key_checks_are_the_bounds() -> None:
    assert f"tenant ~ '^{bounds.TENANT_PATTERN}$'" in SCHEMA
    assert f"length(name) <= {bounds.MAX_KEY_NAME_CHARS}" in SCHEMA


def test_the_attempts_setting_has_the_same_range() -> None:
    meta = {type(m).__name__: m for m in config.Settings.model_fields["max_attempts"].metadata}
    assert meta["Ge"].ge == bounds.MIN_ATTEMPTS
    assert meta["Le"].le == bounds.MAX_ATTEMPTS
