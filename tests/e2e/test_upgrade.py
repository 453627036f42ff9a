"""Upgrading in place: the previous release's processes on a database of their own, then
this release's migrations under them, then both releases side by side, then this one alone.

The previous release is the commit CHANGELOG.md names (tests/releases.py); its code runs
as real processes (API, worker, sweeper) from its own tree with this checkout's
dependencies. Jobs are left in every state before the upgrade: succeeded, dead-lettered,
cancelled, running, queued (parked behind the running one), and waiting on a timer, a
callback, children and a message. This release's ``migrate()`` runs while the old worker
holds the running job. Then the old API and worker keep taking jobs on the migrated
schema, this release's API and worker start beside them (jobs through both APIs, both
workers claiming), the old worker and sweeper are stopped with SIGTERM, and the new
processes finish every waiting job (timers moved in SQL, the callback and the message
answered through the new API). Every job must end as its state promised, no effect twice
(the invariants), no 5xx from either API and no error logged by any process
(docs/howto/upgrade.md).

It is about code versions, not carriers: it runs on moto only (``carrier_neutral``).
"""

from __future__ import annotations

import collections
import hashlib
import json
import secrets
import signal
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest
from psycopg.rows import dict_row

from app import __version__
from app.services import auth
from app.states import JobState
from app.store import pool as db_mod
from app.store import sql as sql_files
from app.tools.stack.stack import Process
from tests import releases
from tests.conftest import (
    IN_CI,
    Stack,
    _url_for,
    bearer,
    build_stack,
    run,
    wait_for,
)
from tests.invariants import check_invariants, describe

pytestmark = [pytest.mark.e2e, pytest.mark.carrier_neutral]

# Shorter passes than the defaults, for every process of both releases.
FAST = {
    "TASKLEASE_SWEEP_INTERVAL_SECONDS": "0.5",
    "TASKLEASE_WORKER_HEARTBEAT_SECONDS": "1",
}
LONG = 3600  # a wait nothing ends but the test
CLIENTS: list[httpx.Client] = []  # closed when the test ends


def this_release(openapi: dict[str, Any]) -> bool:
    """The API serving ``openapi`` runs this release's code, not the previous one's: it
    reports this checkout's version (0.3.0 still reported 0.1.0)."""
    return openapi["info"]["version"] == __version__


@pytest.fixture
def empty_database(pg_admin_url: str) -> Iterator[str]:
    """A database with no schema: the previous release migrates it itself."""
    name = f"tasklease_up_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(pg_admin_url, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    try:
        yield _url_for(pg_admin_url, name)
    finally:
        with psycopg.connect(pg_admin_url, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture
def previous_tree() -> Path:
    """The previous release's code; skipped on a laptop whose clone lacks its commit,
    failed under CI=true (CI's clone must have the history)."""
    try:
        release = releases.previous_release()
        commit = releases.resolve(release)
    except releases.ReleaseError as exc:
        if IN_CI:
            pytest.fail(f"{exc} (CI=true: failing instead of skipping)", pytrace=False)
        pytest.skip(str(exc))
    # The release runs on this checkout's dependencies: right only if the lock is the same.
    assert not releases.lock_changed(commit), (
        f"uv.lock changed since release {release.version} ({commit[:12]}): its processes "
        "would run on other dependencies than it was released with; give them a virtualenv "
        "of their own (`uv sync --locked` of that commit's pyproject.toml and uv.lock) "
        "in tests/releases.py"
    )
    return releases.checkout(release)


class Api:
    """One API process's client; remembers every 5xx it answered."""

    def __init__(self, stack: Stack, url: str, key: str, errors: list[str]) -> None:
        self.client = httpx.Client(base_url=url, timeout=30, headers=bearer(key))
        self.errors = errors
        self.process = stack.procs[-1]  # the API process start_api just started
        CLIENTS.append(self.client)

    def call(self, method: str, path: str, key: str | None = None, **kw: Any) -> httpx.Response:
        headers = bearer(key) if key else None
        r = self.client.request(method, path, headers=headers, **kw)
        if r.status_code >= 500:
            self.errors.append(f"{method} {self.client.base_url}{path}: {r.status_code} {r.text}")
        return r

    def submit(self, kind: str, payload: dict[str, Any], key: str | None = None, **kw: Any) -> str:
        r = self.call("POST", "/v1/jobs", key, json={"kind": kind, "payload": payload, **kw})
        assert r.status_code == 202, r.text
        return str(r.json()["id"])

    def ok(self, method: str, path: str, key: str | None = None, **kw: Any) -> Any:
        r = self.call(method, path, key, **kw)
        assert r.status_code < 300, f"{method} {path}: {r.status_code} {r.text}"
        return r.json()


def states(sql: Any, ids: list[str]) -> dict[str, dict[str, Any]]:
    rows = sql.execute(
        "SELECT id::text, state::text, wait_kind FROM jobs WHERE id = ANY(%s::uuid[])", (ids,)
    ).fetchall()
    return {r["id"]: r for r in rows}


def settle(sql: Any, want: dict[str, str], *, timeout: float = 60, what: str = "") -> None:
    """Wait until each job is in its state (``waiting:<kind>`` for a wait of that kind)."""

    def where(row: dict[str, Any]) -> str:
        return f"waiting:{row['wait_kind']}" if row["state"] == "waiting" else row["state"]

    def reached() -> bool:
        now = states(sql, list(want))
        return all(j in now and where(now[j]) == s for j, s in want.items())

    try:
        wait_for(reached, timeout=timeout, what=what or "the jobs' states")
    except pytest.fail.Exception:
        now = states(sql, list(want))
        off = [j for j, s in want.items() if j not in now or where(now[j]) != s]
        pytest.fail(
            f"timed out waiting for {what}:\n"
            + "\n".join(f"want {want[j]}:\n{describe(sql, j)}" for j in off),
            pytrace=False,
        )


def runners(sql: Any, ids: list[str]) -> set[str]:
    """The workers that started a run of these jobs."""
    rows = sql.execute(
        "SELECT DISTINCT worker FROM job_events WHERE job_id = ANY(%s::uuid[]) "
        "AND to_state = 'running'",
        (ids,),
    ).fetchall()
    return {r["worker"] for r in rows}


def fire_timers(sql: Any, ids: list[str]) -> None:
    """Make these jobs' timers due now: the wake time the sleep recorded and the job's."""
    sql.execute(
        "UPDATE effects SET result = to_jsonb(to_char(now() AT TIME ZONE 'UTC', "
        '\'YYYY-MM-DD"T"HH24:MI:SS.US"+00:00"\')) '
        "WHERE job_id = ANY(%s::uuid[]) AND key LIKE 'sleep:%%'",
        (ids,),
    )
    fired = sql.execute(
        "UPDATE jobs SET wake_at = now(), wake_sent_at = NULL "
        "WHERE id = ANY(%s::uuid[]) AND state = 'waiting' AND wait_kind = 'timer'",
        (ids,),
    ).rowcount
    assert fired == len(ids), f"{fired} of {len(ids)} timers were waiting"


def scrypt_key(sql: Any, tenant: str) -> str:
    """A key as keys were made before migration 0005 (salted scrypt): its first check
    re-hashes it, which is what an API of another release must then still accept."""
    key_id, secret, salt = secrets.token_hex(6), secrets.token_urlsafe(32), secrets.token_bytes(16)
    digest = hashlib.scrypt(secret.encode(), salt=salt, **auth.SCRYPT)  # type: ignore[arg-type]
    sql.execute(
        "INSERT INTO api_keys (id, tenant, name, salt, secret_hash) VALUES (%s, %s, 'old', %s, %s)",
        (key_id, tenant, salt, digest),
    )
    return f"{auth.PREFIX}_{key_id}_{secret}"


def errors_logged(stack: Stack) -> list[tuple[Process, str]]:
    """Log lines at error level (or tracebacks) of every process the stack started."""
    found = []
    for proc in stack.procs:
        for line in proc.log_path.read_text(errors="replace").splitlines():
            try:
                level = json.loads(line).get("level") if line.startswith("{") else None
            except json.JSONDecodeError:
                level = None
            if level in ("error", "critical") or line.startswith("Traceback"):
                found.append((proc, f"{proc.name}: {line[:1000]}"))
    return found


def test_the_previous_release_upgrades_in_place_and_runs_beside_this_one(
    previous_tree: Path,  # first: a clone without the release skips before anything starts
    empty_database: str,
    aws_env: dict[str, str],
    sqs: Any,
    tmp_path: Path,
) -> None:
    stack = build_stack(empty_database, aws_env, sqs, tmp_path, "moto")
    stack.env.update(FAST)
    old_env = releases.release_env(previous_tree)
    try:
        with psycopg.connect(empty_database, autocommit=True, row_factory=dict_row) as sql:
            upgrade(stack, sql, empty_database, previous_tree, old_env)
    finally:
        stack.stop_all()
        while CLIENTS:
            CLIENTS.pop().close()


def upgrade(stack: Stack, sql: Any, url: str, tree: Path, old_env: dict[str, str]) -> None:
    server_errors: list[str] = []

    # Given a database the previous release migrated itself...
    done = subprocess.run(
        [sys.executable, "-m", "app.cli", "migrate"],
        cwd=tree,
        env={**stack.env, **old_env},
        capture_output=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stdout.decode() + done.stderr.decode()
    old_versions = {p.stem for p in (tree / "app/store/sql/migrations").glob("*.sql")}
    applied = {r["version"] for r in sql.execute("SELECT version FROM schema_migrations")}
    assert applied == old_versions
    acme, capped, admin = stack.key("acme"), stack.key("capped"), stack.key("ops", admin=True)
    sql.execute("INSERT INTO tenant_limits (tenant, max_running) VALUES ('capped', 1)")
    before_0005 = scrypt_key(sql, "acme")

    # ...its worker, sweeper and API running...
    old_worker = stack.start_worker("old-worker", 4, old_env, cwd=tree)
    old_sweeper = stack.launch("old-sweeper", ["sweep"], old_env, cwd=tree)
    old = Api(stack, stack.start_api(name="old-api", env=old_env, cwd=tree), acme, server_errors)
    assert not this_release(old.ok("GET", "/openapi.json")), "not the old code"

    # ...and jobs in every state, submitted through the old API.
    done_ok = [old.submit("demo.sleep", {"steps": 2}) for _ in range(2)]
    dead = old.submit("demo.flaky", {"permanent": True})
    cancelled = old.submit("demo.nap", {"seconds": LONG})
    timer = old.submit("demo.nap", {"seconds": LONG})
    approval = old.submit("demo.approval", {"timeout_seconds": LONG})
    parent = old.submit("demo.fanout", {"children": 2, "child_seconds": LONG})
    chat = old.submit("demo.chat", {"messages": 2})
    # capped may run one job at once: the blocker runs until cancelled, the others queue.
    blocker = old.submit("demo.sleep", {"seconds": LONG}, capped)
    settle(sql, {blocker: "running"}, what="the blocker to run")
    parked = [old.submit("demo.sleep", {"steps": 2}, capped) for _ in range(2)]
    settle(sql, {cancelled: "waiting:timer", chat: "waiting:message"}, what="the waits")
    old.ok("POST", f"/v1/jobs/{cancelled}/cancel")
    old.ok("POST", f"/v1/jobs/{chat}/messages", json={"topic": "user", "body": "one"})
    children = [
        str(r["id"]) for r in sql.execute("SELECT id FROM jobs WHERE parent_id = %s", (parent,))
    ]
    before = {
        **dict.fromkeys(done_ok, "succeeded"),
        dead: "dead_lettered",
        cancelled: "cancelled",
        timer: "waiting:timer",
        approval: "waiting:callback",
        parent: "waiting:children",
        **dict.fromkeys(children, "waiting:timer"),
        chat: "waiting:message",
        blocker: "running",
        **dict.fromkeys(parked, "queued"),
    }
    settle(sql, before, what="a job in every state before the upgrade")
    assert len(children) == 2

    # When this release's migrations run while the old worker holds the running job...
    new_versions = {v for v, _ in sql_files.migrations()} - old_versions
    assert set(run(db_mod.migrate(url))) == new_versions
    # ...and this release's API starts beside the old one, which cancels the blocker (its
    # worker stops it) and so lets the parked jobs run...
    new = Api(stack, stack.start_api(name="new-api"), acme, server_errors)
    assert this_release(new.ok("GET", "/openapi.json"))
    stale: list[Process] = []  # a release's processes that cannot outlive the migration
    if not releases.heals_stale_plans(tree):
        # 0.1.0's pooled connections keep statements prepared before the migration, which
        # PostgreSQL refuses from then on (its worker would fail every job it takes): it
        # is restarted at once (docs/howto/upgrade.md), its worker told to stop first.
        stale = [old_worker, old_sweeper, old.process]
        for proc in stale:
            proc.send_signal(signal.SIGTERM)
    new.ok("POST", f"/v1/jobs/{blocker}/cancel", capped)
    if stale:
        stack.stop_processes(stale)
        old_worker = stack.start_worker("old-worker-2", 4, old_env, cwd=tree)
        old_sweeper = stack.launch("old-sweeper-2", ["sweep"], old_env, cwd=tree)
        old = Api(
            stack, stack.start_api(name="old-api-2", env=old_env, cwd=tree), acme, server_errors
        )
    settle(
        sql,
        {blocker: "cancelled", **dict.fromkeys(parked, "succeeded")},
        what="the blocker cancelled and the parked jobs run",
    )
    # ...the old processes work on the migrated schema: the old worker alone takes
    # jobs submitted through the old API and the new one.
    first = [old.submit("demo.sleep", {"steps": 2}), new.submit("demo.sleep", {"steps": 2})]
    settle(sql, dict.fromkeys(first, "succeeded"), what="the old worker on the new schema")
    assert runners(sql, first) == {old_worker.name}
    # A key made before 0005 and re-hashed by one release passes the other's check.
    new.ok("GET", "/v1/jobs", before_0005, params={"limit": 1})
    rehashed = sql.execute("SELECT scheme FROM api_keys WHERE name = 'old'").fetchone()
    assert rehashed["scheme"] == auth.SCHEME_HMAC
    old.ok("GET", "/v1/jobs", before_0005, params={"limit": 1})

    # Then with both workers claiming, jobs go through both APIs.
    new_worker = stack.start_worker("new-worker", 4)
    wait_for(lambda: new_worker.ready_path and new_worker.ready_path.exists(), what="new worker")
    both = [api.submit("demo.sleep", {"steps": 3}) for api in (old, new) for _ in range(3)]
    settle(sql, dict.fromkeys(both, "succeeded"), what="the jobs both releases ran")

    # And once the old worker and sweeper stop, the new processes finish every wait.
    stack.stop_processes([old_worker, old_sweeper])
    # The worker finishes what it holds and exits; the sweeper just ends (no pass is lost).
    assert old_worker.returncode == 0 and old_sweeper.returncode in (0, -signal.SIGTERM)
    stack.launch("new-sweeper", ["sweep"])
    fire_timers(sql, [timer, *children])
    new.ok("POST", f"/v1/jobs/{approval}/callbacks/approve", json={"result": {"by": "sam"}})
    new.ok("POST", f"/v1/jobs/{chat}/messages", json={"topic": "user", "body": "two"})
    new.ok("POST", f"/v1/jobs/{dead}/redrive")
    after = {
        **dict.fromkeys([timer, approval, parent, chat, *children], "succeeded"),
        dead: "dead_lettered",
    }
    settle(sql, after, what="every wait finished by this release")
    assert runners(sql, [timer, approval, parent, chat]) >= {"new-worker"}

    every = [*before, *first, *both]
    rows = {
        r["id"]: r
        for r in sql.execute(
            "SELECT id::text, state::text, result, redrives FROM jobs WHERE id = ANY(%s::uuid[])",
            (every,),
        )
    }
    assert rows[timer]["result"]["naps"] == 1
    assert rows[approval]["result"] == {"approved": True, "answer": {"by": "sam"}}
    assert rows[parent]["result"] == {"children": 2, "succeeded": 2, "failed": 0, "unfinished": 0}
    replies = [a["reply"] for a in rows[chat]["result"]["answers"]]
    assert replies == ["you said: one", "you said: two"]
    assert rows[dead]["redrives"] == 1
    ended = collections.Counter(r["state"] for r in rows.values())
    assert set(ended) == {"succeeded", "dead_lettered", "cancelled"}, ended
    # The old API still reads every job, the ones the new release wrote included.
    for job_id in every:
        assert old.ok("GET", f"/v1/jobs/{job_id}", admin)["state"] in (
            JobState.SUCCEEDED,
            JobState.DEAD_LETTERED,
            JobState.CANCELLED,
        )
    check_invariants(sql, stack, every)
    assert not server_errors, "\n".join(server_errors)
    logged = [
        line
        for proc, line in errors_logged(stack)
        if not (proc in stale and db_mod.STALE_PLAN in line)  # 0.1.0's, before its restart
    ]
    assert not logged, "\n".join(logged)
