"""`tasklease limits set --daily-tokens` writes a tenant's daily token budget and keeps its
other limits; a worker started with a bad provider budget stops, naming the variable."""

from __future__ import annotations

import subprocess
import sys
from typing import Any

import pytest

from tests.conftest import ROOT, Stack
from tests.e2e.test_cli_output import cli, ok

# What this module checks does not depend on the carrier: it runs on moto only.
pytestmark = [pytest.mark.e2e, pytest.mark.carrier_neutral]


def test_limits_set_daily_tokens_keeps_the_tenants_other_limits(stack: Stack, sql: Any) -> None:
    ok(stack, "limits", "set", "acme", "--burst", "7")
    assert "500 model tokens a day" in ok(stack, "limits", "set", "acme", "--daily-tokens", "500")
    row = sql.execute(
        "SELECT burst, daily_tokens FROM tenant_limits WHERE tenant = 'acme'"
    ).fetchone()
    assert (row["burst"], row["daily_tokens"]) == (7, 500)
    code, _, err = cli(stack, "limits", "set", "acme", "--daily-tokens", "0")
    assert code == 2 and "--daily-tokens" in err
    assert sql.execute("SELECT daily_tokens FROM tenant_limits").fetchone()["daily_tokens"] == 500


def test_a_worker_with_a_bad_budget_stops_at_start_up_naming_the_variable(stack: Stack) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "app.cli", "worker"],
        env={**stack.env, "TASKLEASE_MODEL_BUDGETS": '{"gpt-4o-mini": {"rpm": 5}}'},
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode != 0
    assert "TASKLEASE_MODEL_BUDGETS" in proc.stderr
    assert "not a provider/model name" in proc.stderr
