"""The benchmark's stack: the shared local stack (app/tools/stack/stack.py) with the bench's
extras: pg_stat_statements in the embedded PostgreSQL, the counting proxy in front of
the SQS server (the tasklease processes talk to the proxy) or, on the Redis carrier, the
server's own command counts (INFO commandstats), a data directory wiped at each run, and
a worker pool of a chosen size."""

from __future__ import annotations

import json
import logging
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
import uuid
import warnings
from pathlib import Path
from typing import IO, Any

import psycopg

from app import errors
from app.settings import config
from app.tools.stack import embedded
from app.tools.stack.stack import ROOT, Process, Stack, create_queues
from app.transport import QueueUrls
from bench import redis_counts

MARKER = ".tasklease-bench"


def quiet_and_interruptible() -> None:
    """A bench run's process: no UserWarnings or pool chatter over its progress, and
    SIGTERM stops it as Ctrl-C does (its finally blocks stop the stack)."""
    warnings.filterwarnings("ignore", category=UserWarning)
    logging.getLogger("psycopg.pool").setLevel(logging.ERROR)

    def interrupted(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, interrupted)


class Unavailable(errors.TaskleaseError):
    """A server the benchmark needs could not start."""


class BenchStack(Stack):
    def __init__(
        self, sqs: str, data_dir: Path, worker_concurrency: int, transport: str = "sqs"
    ) -> None:
        self.dir = data_dir.resolve()
        super().__init__(self.dir / "logs")
        self.sqs = sqs  # the SQS server (moto, localstack); unused on Redis
        self.transport = transport  # "sqs" or "redis"
        self.redis_counts: redis_counts.CommandStats | None = None
        self.worker_concurrency = worker_concurrency
        self.proxy_url = ""  # the counting proxy in front of the SQS server
        self.pg_stat_statements = False
        self.queue_name = f"tl-bench-{uuid.uuid4().hex[:8]}"
        self.urls: QueueUrls | None = None
        self.api_headers: dict[str, str] = {}
        self.proxy: subprocess.Popen[bytes] | None = None
        self.workers: list[Process] = []

    @property
    def logs(self) -> Path:
        return self.logs_dir

    def log(self, name: str) -> IO[bytes]:
        return self.log_file(name)

    # --- servers ---------------------------------------------------------------

    def prepare_dir(self) -> None:
        d = self.dir
        if d.exists() and any(d.iterdir()) and not (d / MARKER).exists():
            raise errors.ConfigError(f"{d} exists and is not a bench data directory: not wiping it")
        shutil.rmtree(d, ignore_errors=True)
        self.logs.mkdir(parents=True)
        (d / MARKER).write_text("created by make bench; wiped at each run\n")

    def start_postgres_with_stats(self) -> None:
        try:
            self.start_postgres(self.dir / "pgdata", migrate=False)
            assert self.postgres is not None
            # pg_stat_statements must be preloaded: set it, restart, create the extension.
            with psycopg.connect(self.postgres.admin_url, autocommit=True) as conn:
                conn.execute("ALTER SYSTEM SET shared_preload_libraries = 'pg_stat_statements'")
            self.postgres.stop()
            self.start_postgres(self.dir / "pgdata")
            try:
                with psycopg.connect(self.database_url, autocommit=True) as conn:
                    conn.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
                self.pg_stat_statements = True
            except psycopg.Error:
                self.pg_stat_statements = False
        except Exception as exc:
            raise Unavailable(f"embedded PostgreSQL could not start: {exc}") from exc

    def start_sqs_with_proxy(self) -> None:
        try:
            self.start_sqs(self.sqs)
        except errors.TaskleaseError as exc:
            raise Unavailable(f"the SQS server ({self.sqs}) could not start: {exc}") from exc
        port = embedded.free_port()
        self.proxy = self._popen(
            "proxy", [sys.executable, "-m", "bench.proxy", self.endpoint, str(port)], os.environ
        )
        self.proxy_url = f"http://127.0.0.1:{port}"
        embedded.wait_for_http(f"{self.proxy_url}/__counts", timeout=15, proc=self.proxy)
        self.urls = self.create_queues(config.load(queue_name=self.queue_name), self.queue_name)

    def start_redis_carrier(self, url: str | None) -> None:
        """The Redis carrier: the embedded server (or the one at ``url``), the streams and
        their groups, and the command counts the phases read."""
        try:
            self.start_redis(url)
        except errors.TaskleaseError as exc:
            raise Unavailable(f"redis-server could not start: {exc}") from exc
        self.redis_counts = redis_counts.CommandStats(self.redis_url)
        self.urls = self.create_queues(self.settings(), self.queue_name)

    @property
    def on_redis(self) -> bool:
        return self.transport == "redis"

    @property
    def counted_at(self) -> str:
        """Where the phases' broker counts come from, for the report."""
        if self.on_redis:
            return "INFO commandstats (server-side: a script's own commands counted too)"
        return "counted through a proxy"

    @property
    def broker_url(self) -> str:
        return self.redis_url if self.on_redis else self.endpoint

    def settings(self, **overrides: Any) -> config.Settings:
        base: dict[str, Any] = {"queue_name": self.queue_name}
        if self.on_redis:
            base |= {"transport": "redis", "redis_url": self.redis_url}
        if self.urls is not None:
            base |= self.urls.settings()
        return config.load(**base, **overrides)

    async def new_queue(self, name: str) -> str:
        """A fresh queue (and its DLQ) for the raw broker cycle: its URL."""
        return (await create_queues(config.load(queue_name=name), name)).queue_url

    # --- the proxy's counts ----------------------------------------------------

    def counts(self) -> dict[str, dict[str, int]]:
        """The broker requests since ``reset_counts``: SQS actions from the proxy, or Redis
        commands from the server's commandstats (``entries`` only on SQS)."""
        if self.redis_counts is not None:
            return {"calls": self.redis_counts.delta(), "entries": {}}
        with urllib.request.urlopen(f"{self.proxy_url}/__counts", timeout=5) as r:  # noqa: S310
            return dict(json.load(r))

    def reset_counts(self) -> None:
        if self.redis_counts is not None:
            self.redis_counts.mark()
            return
        req = urllib.request.Request(f"{self.proxy_url}/__reset", method="POST", data=b"")  # noqa: S310
        with urllib.request.urlopen(req, timeout=5):  # noqa: S310 - our own loopback proxy
            pass

    # --- app processes ---------------------------------------------------------

    def _popen(
        self, name: str, args: list[str], env: dict[str, str] | os._Environ[str]
    ) -> subprocess.Popen[bytes]:
        fh = self.log(name)
        return subprocess.Popen(  # noqa: S603 - our own interpreter and modules
            args, stdout=fh, stderr=fh, env=dict(env), cwd=ROOT, start_new_session=True
        )

    def start_bench_api(self) -> None:
        assert self.urls is not None
        # On Redis no process may talk to SQS: a dead loopback port makes a stray call fail.
        aws = "http://127.0.0.1:1" if self.on_redis else self.proxy_url
        self.env = {
            **self.process_env(self.urls, self.queue_name, aws),
            "TASKLEASE_WAIT_TIME_SECONDS": "1",
            "TASKLEASE_BATCH_SIZE": "10",
            # The benchmark measures throughput: the per-tenant limits must not be what it finds.
            "TASKLEASE_RATE_LIMIT_PER_SECOND": "100000",
            "TASKLEASE_RATE_LIMIT_BURST": "1000000",
            "TASKLEASE_MAX_JOBS_IN_FLIGHT": "100000000",
            "PYTHONWARNINGS": "ignore::UserWarning",
        }
        self.api_headers = {"Authorization": f"Bearer {self.create_key('bench', 'make bench')}"}
        self.start_api()

    def start_all(self) -> None:
        """A fresh data directory, PostgreSQL with pg_stat_statements, the SQS server
        behind the counting proxy, and the API (no worker): the profiling runs' stack."""
        self.prepare_dir()
        self.start_postgres_with_stats()
        self.start_sqs_with_proxy()
        self.start_bench_api()

    def set_workers(self, n: int, settle: float = 1.5, env: dict[str, str] | None = None) -> None:
        """Exactly ``n`` tasklease worker processes (restarting them all), with ``env``
        added to their environment."""
        self.stop_workers()
        for i in range(n):
            self.workers.append(self.start_worker(f"bench-w{i}", self.worker_concurrency, env))
        time.sleep(settle)  # let them import and open their pools before the clock starts
        dead = [p.returncode for p in self.workers if p.poll() is not None]
        if dead:
            raise errors.TaskleaseError(
                f"worker processes exited at start: {dead} (see {self.logs})"
            )

    def kill_worker(self, i: int) -> None:
        """SIGKILL worker ``i`` (no goodbye: its leases just expire) and start another."""
        victim = self.workers[i]
        victim.kill()
        victim.wait()
        self.workers[i] = self.start_worker(f"bench-w{i}-after-kill", self.worker_concurrency)

    def stop_workers(self) -> None:
        self.stop_processes(self.workers)
        self.workers = []

    def stop(self) -> None:
        self.stop_processes()  # the workers and the API first: they talk through the proxy
        embedded.terminate([self.proxy] if self.proxy else [], grace=3)
        super().stop()
