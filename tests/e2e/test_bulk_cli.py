"""`tasklease jobs search` and `tasklease jobs bulk cancel|redrive` run as processes:
search finds a job by a payload field (a table with the tenant's text as written, and
--json), a bad filter exits 2 naming it, and a bulk cancel through a running API shows
the dry run's count, acts on the matching jobs of the key's tenant only and says how it
went (--json for scripts)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.conftest import Stack, api_client
from tests.e2e.test_cli_output import cli, ok

pytestmark = [pytest.mark.e2e, pytest.mark.carrier_neutral]

MARKUP = "u-[red]42[/]"


def test_search_and_bulk_cancel_from_the_command_line(stack: Stack, sql: Any) -> None:
    url = stack.api()
    key = stack.key("acme")
    with api_client(url, key) as http:
        red = [
            http.post("/v1/jobs", json={"kind": "demo.noop", "payload": {"team": "red"}}).json()[
                "id"
            ]
            for _ in range(4)
        ]
        marked = http.post(
            "/v1/jobs", json={"kind": "demo.noop", "payload": {"user_id": MARKUP}}
        ).json()["id"]
    with api_client(url, stack.key("globex")) as http:
        theirs = http.post("/v1/jobs", json={"kind": "demo.noop", "payload": {"team": "red"}})
    theirs_id = theirs.json()["id"]

    # Search: a table (the text as written, never markup), and JSON as GET /v1/jobs
    # answers the same search ({"items", "next_cursor"}).
    table = ok(stack, "jobs", "search", "--payload", f"user_id={MARKUP}")
    assert marked in table and "1 jobs" in table
    found = json.loads(ok(stack, "jobs", "search", "--payload", "team=red", "--json"))
    assert set(found) == {"items", "next_cursor"}
    assert sorted(j["id"] for j in found["items"]) == sorted([*red, theirs_id])  # all tenants
    assert "lease_token" not in found["items"][0]  # the API's shape, not the row
    by_prefix = json.loads(ok(stack, "jobs", "search", "--id", marked[:13], "--json"))
    assert [j["id"] for j in by_prefix["items"]] == [marked]
    code, _, err = cli(stack, "jobs", "search", "--payload", "no-equals-sign")
    assert code == 2 and "is not FIELD=VALUE" in err
    code, _, err = cli(stack, "jobs", "search", "--id", "zz")
    assert code == 2 and "not a job id" in err

    # Bulk: the dry run counts the key's tenant's jobs only, and changes nothing.
    api = ["--api-url", url, "--api-key", key]
    dry = ok(stack, "jobs", "bulk", "cancel", "--payload", "team=red", "--dry-run", *api)
    assert dry.strip() == "cancel: 4 jobs match"
    assert (
        sql.execute("SELECT count(*) AS n FROM jobs WHERE state <> 'queued'").fetchone()["n"] == 0
    )

    # The run, with --yes and --json: the operation as the API reports it at the end.
    done = json.loads(
        ok(stack, "jobs", "bulk", "cancel", "--payload", "team=red", "--yes", "--json", *api)
    )
    assert (done["state"], done["total"], done["done"], done["failed"]) == ("done", 4, 4, 0)
    rows = sql.execute("SELECT id::text AS id, state::text AS state FROM jobs").fetchall()
    states = {r["id"]: r["state"] for r in rows}
    assert {states[j] for j in red} == {"cancelled"}
    assert states[theirs_id] == "queued" and states[marked] == "queued"

    # Nothing left to act on: the count says so and nothing starts.
    again = ok(stack, "jobs", "bulk", "redrive", "--payload", "team=red", "--yes", *api)
    assert again == ""
