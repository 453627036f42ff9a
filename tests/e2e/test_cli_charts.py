"""`tasklease charts`, run as a process against the test's database: the same series as
GET /v1/charts (--json), a table a kind, --tenant keeping one tenant's, and a bad
--window refused naming it."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.conftest import Stack
from tests.e2e.test_cli_output import cli, ok
from tests.integration.test_metrics_completions import handle, post

pytestmark = [pytest.mark.e2e, pytest.mark.carrier_neutral]


def test_the_charts_command_prints_the_api_s_series_and_a_table(
    stack: Stack, api: Any, sql: Any
) -> None:
    for _ in range(2):
        handle(stack, sql, post(api, "demo.noop", {}), {"succeeded"})
    handle(stack, sql, post(api, "demo.flaky", {"permanent": True}), {"dead_lettered"})

    got = json.loads(ok(stack, "charts", "--window", "day", "--json"))
    assert got["totals"] == {"submitted": 3, "succeeded": 2, "failed": 0, "dead_lettered": 1}
    mine = api.get("/v1/charts?window=day").json()  # acme's, all there is
    assert got["latency"] == mine["latency"] and got["counts"] == mine["counts"]
    assert got["tenant"] is None  # an operator's: every tenant

    shown = ok(stack, "charts", "--window", "day")
    assert "3 submitted, 2 succeeded, 0 failed attempts, 1 dead-lettered" in shown
    rows = {line.split("│")[1].strip(): line for line in shown.splitlines() if "│" in line}
    assert set(rows) >= {"every kind", "demo.noop", "demo.flaky"}
    assert rows["demo.noop"].split("│")[2].strip() == "2"

    other = json.loads(ok(stack, "charts", "--tenant", "globex", "--json"))
    assert other["totals"]["submitted"] == 0 and other["tenant"] == "globex"

    code, _, err = cli(stack, "charts", "--window", "month")
    assert code == 2 and "window" in err
