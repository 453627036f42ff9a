"""What a deployment runs: GET /v1/kinds and `tasklease kinds` list each kind with its
payload's JSON schema, timeout and attempts (issue 30, item 5), from a real API process;
a deployment that names no kinds lists none."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

from tests.conftest import Stack, bearer
from tests.e2e.test_auth_cli import cli

pytestmark = pytest.mark.e2e


def test_the_api_and_the_cli_list_the_kinds_with_their_schemas(stack: Stack) -> None:
    url = stack.api()
    key = stack.key()
    # Given the API's kinds (TASKLEASE_KINDS=app.demos, as the tests name them)
    listed = httpx.get(f"{url}/v1/kinds", headers=bearer(key), timeout=10)
    assert listed.status_code == 200, listed.text
    by_name: dict[str, Any] = {k["name"]: k for k in listed.json()["kinds"]}
    assert {"support.triage", "demo.noop", "agent.research", "demo.write"} <= set(by_name)
    triage = by_name["support.triage"]
    assert triage["timeout_seconds"] == 300
    assert triage["max_attempts"] == stack.settings.max_attempts  # the deployment's default
    assert set(triage["payload_schema"]["required"]) == {"ticket_id", "subject", "body"}
    assert triage["result_schema"]["properties"]["delivered"]["type"] == "boolean"
    assert httpx.get(f"{url}/v1/kinds", timeout=10).status_code == 401  # a key is needed

    # When an operator asks the CLI, Then it shows the same, as a table and as JSON.
    code, out, err = cli(stack, "kinds", "--api-url", url, "--api-key", key)
    assert code == 0, err
    assert "support.triage" in out and "ticket_id*" in out and "300 s" in out
    code, out, err = cli(stack, "kinds", "--json", "--api-url", url, "--api-key", key)
    assert code == 0, err
    assert {k["name"] for k in json.loads(out)["kinds"]} == set(by_name)


def test_a_deployment_without_tasklease_kinds_lists_none_and_says_why(stack: Stack) -> None:
    stack.env["TASKLEASE_KINDS"] = ""
    url = stack.api()
    key = stack.key()
    assert httpx.get(f"{url}/v1/kinds", headers=bearer(key), timeout=10).json() == {"kinds": []}
    refused = httpx.post(
        f"{url}/v1/jobs", headers=bearer(key), json={"kind": "demo.noop", "payload": {}}, timeout=10
    )
    assert refused.status_code == 422, refused.text  # as for any unknown kind
    assert "no job kinds" in refused.text and "TASKLEASE_KINDS" in refused.text
    assert "no job kinds: TASKLEASE_KINDS is empty" in stack.logs()
    code, _out, err = cli(stack, "kinds", "--api-url", url, "--api-key", key)
    assert code == 0
    assert "serves no job kinds" in err
