"""`tasklease alerts`: a tenant's webhook set (a secret made and printed once), listed
without its secret, refused when bad (nothing written), cleared; the alerts listed as a
table with their data escaped, and as JSON; a sweeper started with a bad alert setting
stops, naming the variable."""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

import pytest

from tests.conftest import ROOT, Stack
from tests.e2e.test_cli_output import cli, ok

pytestmark = [pytest.mark.e2e, pytest.mark.carrier_neutral]


def test_set_list_and_clear_a_tenants_webhook(stack: Stack, sql: Any) -> None:
    said = ok(stack, "alerts", "set-webhook", "--tenant", "acme", "--url", "https://x.example/h")
    secret = said.strip().splitlines()[-1]
    assert secret.startswith("whsec_")
    row = sql.execute("SELECT url, secret FROM tenant_alert_webhooks").fetchone()
    assert (row["url"], row["secret"]) == ("https://x.example/h", secret)
    listed = json.loads(ok(stack, "alerts", "webhooks", "--json"))
    assert [(r["tenant"], r["url"]) for r in listed] == [("acme", "https://x.example/h")]
    assert secret not in ok(stack, "alerts", "webhooks")

    code, _, err = cli(
        stack, "alerts", "set-webhook", "--tenant", "acme", "--url", "https://y.example/h",
        "--secret", "hunter2",
    )  # fmt: skip
    assert code == 1 and "whsec_" in err
    assert sql.execute("SELECT url FROM tenant_alert_webhooks").fetchone()["url"] == (
        "https://x.example/h"
    )

    assert "no alert webhook of its own" in ok(stack, "alerts", "clear-webhook", "--tenant", "acme")
    code, _, err = cli(stack, "alerts", "clear-webhook", "--tenant", "acme")
    assert code == 1 and "has no alert webhook" in err


def test_alerts_list_shows_markup_in_an_error_as_text_and_gives_json(
    stack: Stack, sql: Any
) -> None:
    sql.execute(
        "INSERT INTO alerts (dedup_key, type, tenant, detail, attempts, last_error) VALUES "
        "('dead_lettered:x:1', 'job.dead_lettered', 'acme', '{}', 2, '[red]boom[/red]')"
    )
    table = ok(stack, "alerts", "list")
    assert "[red]boom[/red]" in table
    assert "job.dead_lettered" in table
    [row] = json.loads(ok(stack, "alerts", "list", "--json", "--tenant", "acme"))
    assert (row["id"], row["attempts"], row["type"]) == (
        "dead_lettered:x:1",
        2,
        "job.dead_lettered",
    )
    assert json.loads(ok(stack, "alerts", "list", "--json", "--tenant", "globex")) == []
    code, _, err = cli(stack, "alerts", "list", "--type", "job.exploded")
    assert code == 1 and "not an alert type" in err


def test_a_sweeper_with_a_webhook_but_no_secret_stops_naming_the_variable(stack: Stack) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "app.cli", "sweep", "--once"],
        env={**stack.env, "TASKLEASE_ALERT_WEBHOOK_URL": "https://x.example/h"},
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode != 0
    said = " ".join(proc.stderr.split())  # rich wraps the line
    assert "TASKLEASE_ALERT_WEBHOOK_SECRET must be set with TASKLEASE_ALERT_WEBHOOK_URL" in said
