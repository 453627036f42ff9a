"""bench/profile_worker.py names the statements pg_stat_statements reports by the named
query each came from, though PostgreSQL reports them changed: each constant made $n
(numbered after the statement's own parameters), a list of constants as its first
(PostgreSQL 17: ``IN ($5 /*, ... */)``), extract's field a constant too, no closing
semicolon. Here that rewriting is done by hand on the worker's statements."""

from __future__ import annotations

import itertools
import re

import pytest

from app.store import sql
from bench.profile_worker import NAMED, _shape

_LITERAL = re.compile(r"'(?:[^']|'')*'|(?<!\$)\b\d+\b|\b(?:true|false)\b|(?<=extract\()epoch")


def as_reported(text: str) -> str:
    """``text`` as pg_stat_statements shows it."""
    numbers = itertools.count(len(set(re.findall(r"\$\d+", text))) + 1)
    out = _LITERAL.sub(lambda m: f"${next(numbers)}", text)
    out = re.sub(r"\((\$\d+)(?:, \$\d+)+\)", r"(\1 /*, ... */)", out)
    return out.rstrip().rstrip(";")


@pytest.mark.parametrize(
    "name",
    ["claim_batch", "lock_claim_tenants", "start_batch", "succeed_batch", "release_parked"],
)
def test_a_worker_statement_as_reported_is_named(name: str) -> None:
    text = sql.positional[sql.queries[name]][0]
    reported = as_reported(text)
    assert reported != text  # the rewriting did change it
    assert NAMED.get(_shape(reported)) == name


def test_the_claim_as_reported_has_each_change_the_shape_undoes() -> None:
    reported = as_reported(sql.positional[sql.queries["claim_batch"]][0])
    assert "/*, ... */" in reported and "extract($" in reported
    assert not reported.endswith(";")
    assert NAMED.get(_shape(reported)) == "claim_batch"


def test_no_two_named_queries_share_a_shape() -> None:
    assert len(NAMED) == len(sql.queries)


def test_a_statement_of_no_named_query_is_not_named() -> None:
    assert _shape("SELECT count(*) FROM jobs WHERE state = $1") not in NAMED
