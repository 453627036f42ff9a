"""`--json` on the read commands (issue 33): each prints one JSON document on stdout and
nothing else, equal to what the HTTP API answers for the same thing, asked of a real API
process over the same database; jobs run by a real worker process."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import httpx
import pytest

from tests.conftest import Stack, api_client, wait_for
from tests.e2e.test_cli_output import cli

# What it checks (the CLI against the API) does not depend on the carrier: moto only.
pytestmark = [pytest.mark.e2e, pytest.mark.carrier_neutral]


@dataclass
class World:
    """An API, an admin key, a job that succeeded (with effects and published state), one
    that was dead-lettered, and a schedule."""

    url: str
    key: str
    http: httpx.Client
    done: str
    dead: str
    schedule: str

    def get(self, path: str) -> Any:
        answer = self.http.get(path)
        assert answer.status_code == 200, answer.text
        return answer.json()


def make_world(stack: Stack) -> World:
    url = stack.api()
    key = stack.key("ops", admin=True)
    http = api_client(url, key)
    tenant = api_client(url, stack.key("acme"))
    try:
        ids = []
        for body in (
            {"kind": "demo.publish", "payload": {"steps": 2}},
            {"kind": "demo.flaky", "payload": {"permanent": True}, "max_attempts": 1},
        ):
            answer = tenant.post("/v1/jobs", json=body)
            assert answer.status_code == 202, answer.text
            ids.append(str(answer.json()["id"]))
        made = tenant.post(
            "/v1/schedules",
            json={"cron": "0 0 1 1 *", "kind": "demo.noop", "payload": {}, "name": "yearly"},
        )
        assert made.status_code == 201, made.text
    finally:
        tenant.close()
    stack.worker()
    # For the commands that ask the API (kinds); the others read the database.
    stack.env |= {"TASKLEASE_API_URL": url, "TASKLEASE_API_KEY": key}
    world = World(url, key, http, ids[0], ids[1], str(made.json()["id"]))
    wait_for(
        lambda: (
            [world.get(f"/v1/jobs/{j}")["state"] for j in ids] == ["succeeded", "dead_lettered"]
        ),
        what="one job succeeded and one dead-lettered",
        timeout=60,
    )
    return world


def job_documents(w: World) -> dict[str, Any]:
    base = f"/v1/jobs/{w.done}"
    return {
        "job": w.get(base),
        "events": w.get(f"{base}/events"),
        "effects": w.get(f"{base}/effects"),
        "callbacks": w.get(f"{base}/callbacks"),
        "state": w.get(f"{base}/state"),
        "messages": w.get(f"{base}/messages"),
    }


Case = tuple[Callable[[World], list[str]], Callable[[World], Any]]
CASES: dict[str, Case] = {
    "jobs list": (lambda w: ["jobs", "list"], lambda w: w.get("/v1/jobs")),
    "jobs show": (lambda w: ["jobs", "show", w.done], job_documents),
    "dlq list": (lambda w: ["dlq", "list"], lambda w: w.get("/v1/dead-letters")),
    "schedules list": (lambda w: ["schedules", "list"], lambda w: w.get("/v1/schedules")),
    "schedules show": (
        lambda w: ["schedules", "show", w.schedule],
        lambda w: w.get(f"/v1/schedules/{w.schedule}"),
    ),
    "kinds": (lambda w: ["kinds"], lambda w: w.get("/v1/kinds")),
}


@pytest.mark.parametrize("command", list(CASES))
def test_a_read_commands_json_is_the_apis_answer(stack: Stack, command: str) -> None:
    world = make_world(stack)
    args, expected = CASES[command]
    code, out, err = cli(stack, *args(world), "--json")
    assert code == 0, err
    printed = json.loads(out)  # the whole of stdout: one document, nothing else
    assert printed == expected(world)
    # Not an empty answer that would match anything: the world's data is in it.
    assert world.done in out or world.dead in out or world.schedule in out or command == "kinds"
    assert "demo.noop" in out or command != "kinds"
    world.http.close()


def test_the_admin_commands_json_holds_what_the_database_has(stack: Stack, sql: Any) -> None:
    key = stack.key("acme", name="ci")
    code, _, err = cli(stack, "limits", "set", "acme", "--rate", "2.5")
    assert code == 0, err

    code, out, err = cli(stack, "keys", "list", "--json")
    assert code == 0, err
    keys = json.loads(out)
    stored = sql.execute("SELECT id, tenant, name, admin FROM api_keys").fetchall()
    assert [(k["id"], k["tenant"], k["name"], k["admin"]) for k in keys] == [
        (r["id"], r["tenant"], r["name"], r["admin"]) for r in stored
    ]
    assert key not in out and key.rsplit("_", 1)[1] not in out  # never the secret

    code, out, err = cli(stack, "limits", "list", "--json")
    assert code == 0, err
    limits = json.loads(out)
    (acme,) = [r for r in limits["items"] if r["tenant"] == "acme"]
    assert acme["rate_per_second"] == 2.5 and acme["burst"] is None
    assert limits["defaults"]["rate_per_second"] == stack.settings.rate_limit_per_second

    stack.env["TASKLEASE_RETAIN_SUCCEEDED_SECONDS"] = "60"
    code, out, err = cli(stack, "prune", "--dry-run", "--json")
    assert code == 0, err
    due = json.loads(out)["due"]
    assert {"state": "succeeded", "kept_for_seconds": 60.0} in [
        {k: d[k] for k in ("state", "kept_for_seconds")} for d in due
    ]


def test_an_error_with_json_is_on_stderr_and_stdout_stays_empty(stack: Stack) -> None:
    code, out, err = cli(stack, "jobs", "show", "00000000-0000-0000-0000-000000000000", "--json")
    assert (code, out) == (1, "")
    assert "error: no job 00000000-0000-0000-0000-000000000000" in err, err
    code, out, err = cli(stack, "schedules", "show", "nope", "--json")
    assert (code, out) == (2, "")
    assert "not a schedule id: 'nope'" in err
