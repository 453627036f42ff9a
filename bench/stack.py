"""The benchmark's stack: embedded PostgreSQL (with pg_stat_statements), the SQS server
(moto or LocalStack), the counting proxy, the queues, the migrations, the API and N
worker processes. Built from app/embedded.py's pieces; every process it starts it stops."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import subprocess
import sys
import time
import urllib.parse
import urllib.request
import uuid
from pathlib import Path
from typing import IO, Any

import psycopg

from app import config, errors
from app.services import auth
from app.stack import embedded
from app.store import pool as db
from app.transport import sqs as queue

ROOT = Path(__file__).resolve().parent.parent
MARKER = ".tasklease-bench"


class Unavailable(errors.TaskleaseError):
    """A server the benchmark needs could not start."""


class Stack:
    def __init__(self, sqs: str, data_dir: Path, worker_concurrency: int) -> None:
        self.sqs = sqs
        self.dir = data_dir.resolve()
        self.logs = self.dir / "logs"
        self.worker_concurrency = worker_concurrency
        self.postgres: embedded.EmbeddedPostgres | None = None
        self.moto: embedded.MotoServer | None = None
        self.localstack_started = False
        self.endpoint = ""  # the real SQS endpoint
        self.proxy_url = ""  # the counting proxy in front of it
        self.database_url = ""
        self.pg_stat_statements = False
        self.queue_name = f"tl-bench-{uuid.uuid4().hex[:8]}"
        self.urls: queue.QueueUrls | None = None
        self.env: dict[str, str] = {}
        self.api_url = ""
        self.api_headers: dict[str, str] = {}
        self.api: subprocess.Popen[bytes] | None = None
        self.proxy: subprocess.Popen[bytes] | None = None
        self.workers: list[subprocess.Popen[bytes]] = []
        self.others: list[subprocess.Popen[bytes]] = []
        self._files: list[IO[bytes]] = []

    # --- servers ---------------------------------------------------------------

    def log(self, name: str) -> IO[bytes]:
        fh = (self.logs / f"{name}.log").open("ab")
        self._files.append(fh)
        return fh

    def prepare_dir(self) -> None:
        d = self.dir
        if d.exists() and any(d.iterdir()) and not (d / MARKER).exists():
            raise errors.ConfigError(f"{d} exists and is not a bench data directory: not wiping it")
        shutil.rmtree(d, ignore_errors=True)
        self.logs.mkdir(parents=True)
        (d / MARKER).write_text("created by make bench; wiped at each run\n")

    def start_postgres(self) -> None:
        try:
            self.postgres = embedded.EmbeddedPostgres(self.dir / "pgdata")
            self.postgres.start()
            # pg_stat_statements must be preloaded: set it, restart, create the extension.
            with psycopg.connect(self.postgres.admin_url, autocommit=True) as conn:
                conn.execute("ALTER SYSTEM SET shared_preload_libraries = 'pg_stat_statements'")
            self.postgres.stop()
            self.database_url = self.postgres.start()
            try:
                with psycopg.connect(self.database_url, autocommit=True) as conn:
                    conn.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
                self.pg_stat_statements = True
            except psycopg.Error:
                self.pg_stat_statements = False
            asyncio.run(db.migrate(self.database_url))
        except Exception as exc:
            raise Unavailable(f"embedded PostgreSQL could not start: {exc}") from exc

    def start_sqs(self) -> None:
        try:
            if self.sqs == "localstack":
                self.endpoint = self._localstack()
            else:
                self.moto = embedded.MotoServer(port=embedded.free_port(), log=self.log("moto"))
                self.endpoint = self.moto.start()
        except errors.TaskleaseError as exc:
            raise Unavailable(f"the SQS server ({self.sqs}) could not start: {exc}") from exc
        port = embedded.free_port()
        self.proxy = self._popen(
            "proxy", [sys.executable, "-m", "bench.proxy", self.endpoint, str(port)], os.environ
        )
        self.proxy_url = f"http://127.0.0.1:{port}"
        embedded.wait_for_http(f"{self.proxy_url}/__counts", timeout=15, proc=self.proxy)
        os.environ.update(embedded.local_aws_env(self.endpoint))
        self.urls = asyncio.run(self._create_queues(self.queue_name))

    def _localstack(self) -> str:
        endpoint = os.environ.get("LOCALSTACK_ENDPOINT", "http://127.0.0.1:4566").rstrip("/")
        with contextlib.suppress(errors.TaskleaseError):
            embedded.wait_for_http(f"{endpoint}/_localstack/health", timeout=2)
            return endpoint  # already running: somebody else's, left running
        port = urllib.parse.urlsplit(endpoint).port or 4566
        done = subprocess.run(  # noqa: S603 - our own script
            ["bash", str(ROOT / "localstack" / "run.sh"), "start"],  # noqa: S607
            env={**os.environ, "LOCALSTACK_PORT": str(port)},
            stdout=subprocess.PIPE,
            stderr=self.log("localstack"),
            check=False,
            timeout=240,
        )
        if done.returncode == 3:
            raise errors.TaskleaseError("Python 3.13 (needed by LocalStack) was not found")
        if done.returncode != 0:
            raise errors.TaskleaseError(f"localstack/run.sh start exited {done.returncode}")
        self.localstack_started = True
        return endpoint

    def settings(self, **overrides: Any) -> config.Settings:
        base: dict[str, Any] = {"queue_name": self.queue_name}
        if self.urls is not None:
            base |= {"queue_url": self.urls.queue_url, "dlq_url": self.urls.dlq_url}
        return config.load(**base, **overrides)

    async def _create_queues(self, name: str) -> queue.QueueUrls:
        sqs = queue.Queue(config.load(queue_name=name))
        await sqs.open()
        try:
            return await sqs.create_queues(name)
        finally:
            await sqs.close()

    async def new_queue(self, name: str) -> str:
        """A fresh queue (and its DLQ) for the raw broker cycle: its URL."""
        return (await self._create_queues(name)).queue_url

    # --- the proxy's counts ----------------------------------------------------

    def counts(self) -> dict[str, dict[str, int]]:
        with urllib.request.urlopen(f"{self.proxy_url}/__counts", timeout=5) as r:  # noqa: S310
            return dict(json.load(r))

    def reset_counts(self) -> None:
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

    def start_api(self) -> None:
        assert self.urls is not None
        base = {k: v for k, v in os.environ.items() if not k.startswith("TASKLEASE_")}
        self.env = {
            **base,
            **embedded.local_aws_env(self.proxy_url),
            "TASKLEASE_DATABASE_URL": self.database_url,
            "TASKLEASE_QUEUE_URL": self.urls.queue_url,
            "TASKLEASE_DLQ_URL": self.urls.dlq_url,
            "TASKLEASE_QUEUE_NAME": self.queue_name,
            "TASKLEASE_WAIT_TIME_SECONDS": "1",
            "TASKLEASE_BATCH_SIZE": "10",
            # The benchmark measures throughput: the per-tenant limits must not be what it finds.
            "TASKLEASE_RATE_LIMIT_PER_SECOND": "100000",
            "TASKLEASE_RATE_LIMIT_BURST": "1000000",
            "TASKLEASE_MAX_JOBS_IN_FLIGHT": "100000000",
            "PYTHONWARNINGS": "ignore::UserWarning",
        }
        key = asyncio.run(auth.create_key_at(self.database_url, "bench", name="make bench"))
        self.api_headers = {"Authorization": f"Bearer {key}"}
        port = embedded.free_port()
        self.api_url = f"http://127.0.0.1:{port}"
        self.api = self._popen(
            "api", [sys.executable, "-m", "app.cli", "api", "--port", str(port)], self.env
        )
        embedded.wait_for_http(f"{self.api_url}/healthz", timeout=30, proc=self.api)

    def set_workers(self, n: int, settle: float = 1.5) -> None:
        """Exactly ``n`` tasklease worker processes (restarting them all)."""
        self.stop_workers()
        for i in range(n):
            args = ["worker", "--concurrency", str(self.worker_concurrency)]
            env = {**self.env, "TASKLEASE_WORKER_ID": f"bench-w{i}"}
            self.workers.append(
                self._popen(f"worker-{i}", [sys.executable, "-m", "app.cli", *args], env)
            )
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
        args = ["worker", "--concurrency", str(self.worker_concurrency)]
        env = {**self.env, "TASKLEASE_WORKER_ID": f"bench-w{i}-after-kill"}
        self.workers[i] = self._popen(
            f"worker-{i}-after-kill", [sys.executable, "-m", "app.cli", *args], env
        )

    def stop_workers(self) -> None:
        embedded.terminate(self.workers)
        self.workers = []

    def stop(self) -> None:
        embedded.terminate([*self.workers, *self.others, *([self.api] if self.api else [])])
        embedded.terminate([self.proxy] if self.proxy else [], grace=3)
        if self.moto is not None:
            self.moto.stop()
        if self.localstack_started:
            with contextlib.suppress(Exception):
                subprocess.run(  # noqa: S603
                    ["bash", str(ROOT / "localstack" / "run.sh"), "stop"],  # noqa: S607
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                    check=False,
                    timeout=60,
                )
        if self.postgres is not None:
            with contextlib.suppress(Exception):
                self.postgres.stop()
        for fh in self._files:
            fh.close()
