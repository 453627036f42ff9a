"""Workers seen from the database, with real processes: an API process and two
`tasklease worker` processes register and heartbeat; the one running a job says so; one
killed with SIGKILL reads as gone once its silence passes the bound (and not before its
last heartbeat ages past it), the one stopped with SIGTERM reads as stopped at once.
`tasklease workers` and `tasklease kinds` show the same, as tables and as JSON."""

from __future__ import annotations

import json
import signal
import time
from typing import Any

import httpx
import pytest

from tests.conftest import Stack, bearer, wait_for
from tests.e2e.test_auth_cli import cli

# carrier_neutral: the workers' rows (heartbeat, gone, stopped) are written by the
# worker process whatever carrier it polls.
pytestmark = [pytest.mark.e2e, pytest.mark.carrier_neutral]

HEARTBEAT = 0.3
GONE = 2.5


def statuses(url: str, key: str) -> dict[str, dict[str, Any]]:
    """name -> the newest row of that worker name."""
    resp = httpx.get(f"{url}/v1/workers", headers=bearer(key), timeout=10)
    assert resp.status_code == 200, resp.text
    out: dict[str, dict[str, Any]] = {}
    for w in resp.json()["workers"]:  # most recently seen first
        out.setdefault(w["name"], w)
    return out


def test_workers_register_heartbeat_and_read_as_gone_when_killed_or_stopped_when_stopped(
    stack: Stack, sql: Any
) -> None:
    stack.env["TASKLEASE_WORKER_HEARTBEAT_SECONDS"] = str(HEARTBEAT)
    stack.env["TASKLEASE_WORKER_GONE_SECONDS"] = str(GONE)
    url = stack.api()
    admin, acme = stack.key("ops", admin=True), stack.key("acme")
    doomed = stack.worker(name="doomed")
    calm = stack.worker(name="calm")
    names = {doomed.name, calm.name}

    rows = wait_for(
        lambda: (s := statuses(url, admin)) and names <= set(s) and s,
        what="both workers registered",
        timeout=30,
    )
    assert {rows[n]["status"] for n in names} == {"alive"}
    assert {rows[n]["pid"] for n in names} == {doomed.pid, calm.pid}
    assert {rows[n]["runtime"] for n in names} == {"process"}
    first_seen = {n: rows[n]["last_seen"] for n in names}

    # A job that runs a few seconds: the worker holding it says it runs one.
    resp = httpx.post(
        f"{url}/v1/jobs",
        json={"kind": "demo.sleep", "payload": {"seconds": 1.0, "steps": 3}},
        headers=bearer(acme),
        timeout=10,
    )
    assert resp.status_code == 202, resp.text
    job_id = resp.json()["id"]
    busy = wait_for(
        lambda: [n for n, w in statuses(url, admin).items() if n in names and w["running"] == 1],
        what="a worker showing the job it runs",
        timeout=30,
    )
    assert len(busy) == 1
    runner = sql.execute("SELECT lease_owner FROM jobs WHERE id = %s", (job_id,)).fetchone()
    assert runner["lease_owner"] == busy[0]  # the one that holds its lease
    wait_for(
        lambda: (
            sql.execute("SELECT state FROM jobs WHERE id = %s", (job_id,)).fetchone()["state"]
            == "succeeded"
        ),
        what="the job to succeed",
        timeout=30,
    )
    rows = wait_for(
        lambda: (s := statuses(url, admin)) and all(s[n]["running"] == 0 for n in names) and s,
        what="no job running any more",
    )
    assert all(rows[n]["last_seen"] > first_seen[n] for n in names)  # they heartbeat

    # SIGKILL one: no last word; SIGTERM the other: a clean stop.
    doomed.send_signal(signal.SIGKILL)
    calm.send_signal(signal.SIGTERM)
    killed_at = time.monotonic()
    assert calm.wait(timeout=30) == 0
    doomed.wait(timeout=10)
    rows = statuses(url, admin)
    assert rows[calm.name]["status"] == "stopped"
    assert rows[calm.name]["stopped_at"] is not None
    if time.monotonic() - killed_at < GONE - 1:  # silence, not yet past the bound
        assert rows[doomed.name]["status"] == "alive"
    rows = wait_for(
        lambda: (s := statuses(url, admin))[doomed.name]["status"] == "gone" and s,
        what="the killed worker read as gone",
        timeout=GONE + 10,
    )
    assert time.monotonic() - killed_at >= GONE - HEARTBEAT - 0.5
    assert rows[doomed.name]["stopped_at"] is None
    assert rows[doomed.name]["seen_seconds_ago"] >= GONE

    # The CLI shows the same: a table, and JSON for scripts; a tenant key is refused.
    code, out, err = cli(stack, "workers", "--api-url", url, "--api-key", admin)
    assert code == 0, err
    assert "gone" in out and "stopped" in out and doomed.name in out and calm.name in out
    code, out, err = cli(stack, "workers", "--json", "--api-url", url, "--api-key", admin)
    assert code == 0, err
    listed = {w["name"]: w["status"] for w in json.loads(out)["workers"]}
    assert listed[doomed.name] == "gone" and listed[calm.name] == "stopped"
    code, out, err = cli(stack, "workers", "--api-url", url, "--api-key", acme)
    assert code == 1
    assert "admin" in err
    # An API that cannot be reached: the reason, not a traceback.
    code, out, err = cli(stack, "workers", "--api-url", "http://127.0.0.1:9", "--api-key", admin)
    assert code == 1
    assert "cannot reach the tasklease API" in err and "Traceback" not in err

    # And the kind's count: the job it ran, succeeded.
    code, out, err = cli(stack, "kinds", "--json", "--api-url", url, "--api-key", acme)
    assert code == 0, err
    sleep = next(k for k in json.loads(out)["kinds"] if k["name"] == "demo.sleep")
    assert sleep["counts"]["succeeded"] == 1 and sleep["counts"]["queued"] == 0
    code, out, err = cli(stack, "kinds", "--api-url", url, "--api-key", acme)
    assert code == 0, err
    assert "succeeded 1" in out
