"""``tasklease chaos``: the chaos gate (issue 3, DESIGN.md "Invariants").

Starts a stack of its own in a fresh data directory (embedded PostgreSQL, moto's
SQS server or LocalStack, webhook receiver, API, K workers, sweeper), submits N
``support.triage`` jobs through the API while the fake model injects transient
and permanent failures and some workers answer slower than the visibility
timeout, SIGKILLs a random worker every few seconds, restarts the SQS server once
(moto loses every message: a broker that drops messages) and PostgreSQL once,
then drains, redrives the dead letters whose cause was transient (with that
cause gone), drains again, and checks the outcome the way Jepsen's queue checker
does: from the database, the fake model's call log and the webhook's deliveries.
Exit code: 0 all invariants hold, 1 some do not, 3 a server could not start, 4 the run
could not complete (a fault could not be injected), 130 interrupted.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import datetime as dt
import json
import logging
import math
import os
import random
import shutil
import signal
import subprocess
import sys
import time
import traceback
import urllib.parse
import uuid
import warnings
from collections import Counter, defaultdict
from pathlib import Path
from typing import IO, Any, LiteralString

import httpx
from rich.console import Console, Group
from rich.live import Live
from rich.table import Table

from app import config, errors
from app.config import Settings
from app.services import auth
from app.stack import embedded
from app.states import FINAL_FOR_NOW, JobState
from app.store import pool as db
from app.transport import sqs as queue

err = Console(stderr=True)
out = Console()

EXIT_OK, EXIT_VIOLATED, EXIT_UNAVAILABLE, EXIT_ABORTED, EXIT_INTERRUPTED = 0, 1, 3, 4, 130
MARKER = ".tasklease-chaos"  # only a directory holding this file is ever wiped
ROOT = Path(__file__).resolve().parent.parent
FINAL = tuple(s.value for s in FINAL_FOR_NOW)

# Until app/redrive.py lands: the redrive of a transient dead letter as one statement.
# The job goes back to queued with its attempt budget reset; the outbox row makes the
# sweeper's relay send its message (no marker needed: a queued job is claimable).
TRANSIENT_DEAD_LETTERS: LiteralString = """
SELECT id FROM jobs
WHERE state = 'dead_lettered' AND coalesce(last_error, '') NOT LIKE 'permanent:%%'
"""

SUBJECTS = [
    ("Charged twice for my invoice", "My card was charged twice this month, please refund."),
    ("App crashes on login", "Since the update the app crashes with an error at sign in."),
    ("Password reset email never arrives", "I asked for a reset of my account password."),
    ("Please add dark mode", "It would be nice to have a dark theme. Feature request."),
    ("Site down, urgent", "Nothing loads since this morning: an outage? Please help asap."),
    ("Question about my plan", "Which plan fits a team of five?"),
]


@dataclasses.dataclass(frozen=True)
class Config:
    jobs: int = 200
    workers: int = 3
    sqs: str = "moto"  # moto | localstack
    transient_rate: float = 0.2
    permanent_rate: float = 0.05
    slow_rate: float = 0.1
    tagged_rate: float = 0.02  # tickets tagged [permanent] and, as many again, [transient:N]
    kill_every: float = 3.0
    # The fault phase lasts until this many kills too: a slow broker restart (LocalStack
    # takes up to 15 s) must not eat the window the kills were meant to have.
    min_kills: int = 3
    fault_seconds: float = 20.0
    seed: int = 1
    data_dir: Path = Path(".tasklease/chaos")
    visibility: int = 4
    max_attempts: int = 3
    clients: int = 8
    drain_timeout: float = 300.0


@dataclasses.dataclass
class Run:
    """What happened, as the run goes: faults, timings, acknowledgements."""

    started: float = dataclasses.field(default_factory=time.monotonic)
    phase: str = "starting"
    acked: dict[str, str] = dataclasses.field(default_factory=dict)  # ticket_id -> job id
    submit_retries: int = 0
    rejected: list[str] = dataclasses.field(default_factory=list)
    kills: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    sqs_restarts: int = 0
    pg_restarts: int = 0
    exits: list[str] = dataclasses.field(default_factory=list)  # processes that died unbidden
    last_fault: float | None = None
    timings: dict[str, float] = dataclasses.field(default_factory=dict)
    counts: dict[str, int] = dataclasses.field(default_factory=dict)
    notes: list[str] = dataclasses.field(default_factory=list)

    def note(self, text: str) -> None:
        self.notes.append(f"{time.monotonic() - self.started:6.1f}s  {text}")
        # Under the live display rich prints this above it, so the fault log stays on screen.
        err.print(self.notes[-1], highlight=False)

    def mark(self, name: str) -> None:
        self.timings[name] = round(time.monotonic() - self.started, 2)


# --- the stack ------------------------------------------------------------------


class Stack:
    """Every process of one chaos run; each is stopped by its pid, never by name."""

    def __init__(self, cfg: Config) -> None:
        self.cfg = cfg
        self.dir = cfg.data_dir.resolve()
        self.logs_dir = self.dir / "logs"
        self.postgres: embedded.EmbeddedPostgres | None = None
        self.moto: embedded.MotoServer | None = None
        self.localstack_started = False
        self.endpoint = ""
        self.database_url = ""
        self.queue_name = f"tl-chaos-{uuid.uuid4().hex[:8]}"
        self.urls: queue.QueueUrls | None = None
        self.env: dict[str, str] = {}
        self.procs: dict[str, subprocess.Popen[bytes]] = {}  # name -> process
        self.workers: dict[int, str] = {}  # slot -> process name
        self.generation = 0
        self.worker_env: dict[str, str] = {}
        self.api_url = ""
        self.api_headers: dict[str, str] = {}
        self.hook_url = ""
        self._files: list[IO[bytes]] = []

    # start-up

    def prepare_dir(self) -> None:
        d = self.dir
        if d.exists() and any(d.iterdir()) and not (d / MARKER).exists():
            raise errors.ConfigError(
                f"--data-dir {d} exists and is not a chaos data directory (no {MARKER}): "
                "refusing to wipe it"
            )
        self._stop_leftovers()
        shutil.rmtree(d, ignore_errors=True)
        self.logs_dir.mkdir(parents=True)
        (d / MARKER).write_text("created by tasklease chaos; wiped at each run\n")

    def _stop_leftovers(self) -> None:
        """Processes an earlier run started and could not stop (it was SIGKILLed)."""
        try:
            pids = json.loads((self.dir / "pids.json").read_text())
        except (OSError, ValueError):
            return
        for pid in pids:
            try:
                cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
            except OSError:
                continue
            if b"app.cli" in cmdline or b"moto.server" in cmdline:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)

    def _save_pids(self) -> None:
        pids = [p.pid for p in self.procs.values() if p.poll() is None]
        if self.moto and self.moto.proc:
            pids.append(self.moto.proc.pid)
        (self.dir / "pids.json").write_text(json.dumps(pids))

    def _log(self, name: str) -> IO[bytes]:
        fh = (self.logs_dir / f"{name}.log").open("ab")
        self._files.append(fh)
        return fh

    def start_servers(self) -> None:
        """PostgreSQL, the SQS server, the queues, the migrations. Raises Unavailable."""
        try:
            self.postgres = embedded.EmbeddedPostgres(self.dir / "pgdata")
            self.database_url = self.postgres.start()
            asyncio.run(db.migrate(self.database_url))
        except Exception as exc:
            raise Unavailable(f"embedded PostgreSQL could not start: {exc}") from exc
        try:
            if self.cfg.sqs == "localstack":
                self.endpoint = self._localstack("start", ensure=True)
            else:
                self.moto = embedded.MotoServer(port=embedded.free_port(), log=self._log("moto"))
                self.endpoint = self.moto.start()
        except errors.TaskleaseError as exc:
            raise Unavailable(f"the SQS server ({self.cfg.sqs}) could not start: {exc}") from exc
        self.urls = self.create_queues()

    def _settings(self) -> Settings:
        return config.load(
            queue_name=self.queue_name, visibility_timeout_seconds=self.cfg.visibility
        )

    def create_queues(self) -> queue.QueueUrls:
        os.environ.update(embedded.local_aws_env(self.endpoint))

        async def go() -> queue.QueueUrls:
            sqs = queue.Queue(self._settings())
            await sqs.open()
            try:
                return await sqs.create_queues(self.queue_name)
            finally:
                await sqs.close()

        return asyncio.run(go())

    def start_processes(self) -> None:
        assert self.urls is not None
        cfg = self.cfg
        hook_port, api_port = embedded.free_port(), embedded.free_port()
        self.hook_url = f"http://127.0.0.1:{hook_port}"
        self.api_url = f"http://127.0.0.1:{api_port}"
        base = {k: v for k, v in os.environ.items() if not k.startswith("TASKLEASE_")}
        self.env = {
            **base,
            **embedded.local_aws_env(self.endpoint),
            "TASKLEASE_DATABASE_URL": self.database_url,
            "TASKLEASE_QUEUE_URL": self.urls.queue_url,
            "TASKLEASE_DLQ_URL": self.urls.dlq_url,
            "TASKLEASE_QUEUE_NAME": self.queue_name,
            "TASKLEASE_VISIBILITY_TIMEOUT_SECONDS": str(cfg.visibility),
            "TASKLEASE_WAIT_TIME_SECONDS": "1",
            "TASKLEASE_BACKOFF_BASE_SECONDS": "0.5",
            "TASKLEASE_BACKOFF_CAP_SECONDS": "2",
            "TASKLEASE_OUTBOX_GRACE_SECONDS": "1",
            "TASKLEASE_SWEEP_INTERVAL_SECONDS": "1",
            # After the broker restart the sweeper re-sends the messages of waiting jobs.
            "TASKLEASE_LOST_MESSAGE_SECONDS": "8",
            "TASKLEASE_MODEL_PROVIDER": "fake",
            "TASKLEASE_FAKE_MODEL_LOG": str(self.dir / "model-calls.jsonl"),
            "TASKLEASE_FAKE_MODEL_LATENCY_MS": "50",
            "TASKLEASE_FAKE_MODEL_PERMANENT_RATE": str(cfg.permanent_rate),
            "TASKLEASE_WEBHOOK_URL": f"{self.hook_url}/hook",
            "TASKLEASE_LOG_LEVEL": "INFO",
            # Chaos submits as fast as its clients go; the limits are tested elsewhere.
            "TASKLEASE_RATE_LIMIT_PER_SECOND": "100000",
            "TASKLEASE_RATE_LIMIT_BURST": "1000000",
            "PYTHONWARNINGS": "ignore::UserWarning",
        }
        self.api_headers = {
            "Authorization": "Bearer "
            + asyncio.run(auth.create_key_at(self.database_url, "chaos", name="tasklease chaos"))
        }
        self.worker_env = {"TASKLEASE_FAKE_MODEL_TRANSIENT_RATE": str(cfg.transient_rate)}
        log = ["--log", str(self.dir / "webhook-deliveries.jsonl")]
        hook = self.spawn("webhook", ["webhook-receiver", "--port", str(hook_port), *log])
        embedded.wait_for_http(f"{self.hook_url}/deliveries", timeout=30, proc=hook)
        api = self.spawn("api", ["api", "--port", str(api_port)])
        embedded.wait_for_http(f"{self.api_url}/healthz", timeout=30, proc=api)
        self.spawn("sweeper", ["sweep"])
        for slot in range(cfg.workers):
            self.start_worker(slot)

    def spawn(
        self, name: str, args: list[str], extra: dict[str, str] | None = None
    ) -> subprocess.Popen[bytes]:
        fh = self._log(name)
        proc = subprocess.Popen(  # noqa: S603 - our own interpreter and module
            [sys.executable, "-m", "app.cli", *args],
            stdout=fh,
            stderr=fh,
            env={**self.env, **(extra or {})},
            cwd=ROOT,
            start_new_session=True,  # a Ctrl-C in the terminal reaches chaos only
        )
        self.procs[name] = proc
        self._save_pids()
        return proc

    # workers

    @property
    def slow_slots(self) -> int:
        """Workers whose model calls outlast the visibility timeout (see the module note)."""
        if self.cfg.slow_rate <= 0:
            return 0
        return max(1, min(self.cfg.workers, round(self.cfg.slow_rate * self.cfg.workers)))

    def start_worker(self, slot: int) -> str:
        self.generation += 1
        name = f"w{slot}-{self.generation}"
        latency = self.cfg.visibility * 1000 + 1500 if slot < self.slow_slots else 50
        env = {
            **self.worker_env,
            "TASKLEASE_WORKER_ID": name,
            "TASKLEASE_FAKE_MODEL_LATENCY_MS": str(latency),
        }
        self.spawn(name, ["worker", "--concurrency", "2"], env)
        self.workers[slot] = name
        return name

    def kill_worker(self, rng: random.Random) -> dict[str, Any] | None:
        alive = [(s, n) for s, n in sorted(self.workers.items()) if self.procs[n].poll() is None]
        if not alive:
            return None
        slot, name = rng.choice(alive)
        proc = self.procs[name]
        at = dt.datetime.now(dt.UTC)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        new = self.start_worker(slot)
        return {"at": at.isoformat(), "worker": name, "pid": proc.pid, "replacement": new}

    def restart_workers(self, extra: dict[str, str]) -> None:
        """Every worker stopped (SIGTERM: batches in hand finish), then started with ``extra``."""
        self.worker_env.update(extra)
        names = list(self.workers.values())
        embedded.terminate([self.procs[n] for n in names])
        for slot in list(self.workers):
            self.start_worker(slot)

    def exited(self) -> list[str]:
        """Processes that died without being killed; workers get a replacement."""
        dead = []
        for slot, name in list(self.workers.items()):
            if self.procs[name].poll() is not None:
                dead.append(f"{name} (exit {self.procs[name].returncode})")
                self.start_worker(slot)
        for name in ("api", "sweeper", "webhook"):
            p = self.procs.get(name)
            if p is not None and p.poll() is not None:
                dead.append(f"{name} (exit {p.returncode})")
                del self.procs[name]
        return dead

    # faults on the servers

    def restart_sqs(self) -> None:
        if self.moto is not None:
            self.moto.stop()
            self.moto.start()
            self._save_pids()
        else:
            self._localstack("restart")
        urls = self.create_queues()
        if urls != self.urls:
            raise errors.TaskleaseError(f"the queues came back under new URLs: {urls}")

    def restart_postgres(self) -> None:
        assert self.postgres is not None
        self.postgres.stop()
        url = self.postgres.start()
        if url != self.database_url:
            raise errors.TaskleaseError(f"PostgreSQL came back at another URL: {url}")

    def _localstack(self, command: str, *, ensure: bool = False) -> str:
        endpoint = os.environ.get("LOCALSTACK_ENDPOINT", "http://127.0.0.1:4566").rstrip("/")
        if ensure:
            with contextlib.suppress(errors.TaskleaseError):
                embedded.wait_for_http(f"{endpoint}/_localstack/health", timeout=2)
                return endpoint  # the caller started it
        port = urllib.parse.urlsplit(endpoint).port or 4566
        done = subprocess.run(  # noqa: S603 - our own script
            ["bash", str(ROOT / "localstack" / "run.sh"), command],  # noqa: S607 - bash from PATH
            env={**os.environ, "LOCALSTACK_PORT": str(port)},
            stdout=subprocess.PIPE,
            stderr=self._log("localstack"),
            check=False,
            timeout=180,
        )
        if done.returncode != 0:
            raise errors.TaskleaseError(f"localstack/run.sh {command} exited {done.returncode}")
        self.localstack_started = self.localstack_started or command == "start"
        return endpoint

    # shutdown

    def stop(self) -> None:
        embedded.terminate(self.procs.values())
        if self.moto is not None:
            self.moto.stop()
        if self.localstack_started:
            with contextlib.suppress(Exception):
                self._localstack("stop")
        if self.postgres is not None:
            with contextlib.suppress(Exception):
                self.postgres.stop()
        for fh in self._files:
            fh.close()
        with contextlib.suppress(OSError):
            (self.dir / "pids.json").unlink()


class Unavailable(errors.TaskleaseError):
    """A server the chaos run needs could not start."""


# --- the run --------------------------------------------------------------------


def tickets(cfg: Config) -> tuple[list[dict[str, Any]], dict[str, str]]:
    """The payloads, and the tag each tagged ticket carries (deterministic by --seed)."""
    rng = random.Random(cfg.seed)  # noqa: S311 - reproducible test data, not secrets
    tagged = min(cfg.jobs // 2, math.ceil(cfg.tagged_rate * cfg.jobs)) if cfg.tagged_rate else 0
    picks = rng.sample(range(cfg.jobs), 2 * tagged)
    tags = {f"C-{i}": "[permanent]" for i in picks[:tagged]}
    # Fails as many calls as the attempt budget: dead-lettered, then succeeds once redriven.
    tags |= {f"C-{i}": f"[transient:{cfg.max_attempts}]" for i in picks[tagged:]}
    out = []
    for i in range(cfg.jobs):
        subject, body = SUBJECTS[rng.randrange(len(SUBJECTS))]
        tid = f"C-{i}"
        tag = tags.get(tid)
        out.append(
            {
                "ticket_id": tid,
                "subject": f"{tag} {subject}" if tag else subject,
                "body": body,
                "customer_email": f"c{i}@example.com",
            }
        )
    return out, tags


async def submit_all(cfg: Config, stack: Stack, run: Run, payloads: list[dict[str, Any]]) -> None:
    """Concurrent clients; each job retried with its Idempotency-Key until a 202."""
    todo: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
    for p in payloads:
        todo.put_nowait(p)

    async def client_loop(client: httpx.AsyncClient) -> None:
        while not todo.empty():
            ticket = todo.get_nowait()
            body = {"kind": "support.triage", "payload": ticket, "max_attempts": cfg.max_attempts}
            headers = {"Idempotency-Key": f"chaos-{ticket['ticket_id']}"}
            deadline = time.monotonic() + 120
            while True:
                try:
                    resp = await client.post("/v1/jobs", json=body, headers=headers)
                except httpx.HTTPError:
                    resp = None
                if resp is not None and resp.status_code == 202:
                    run.acked[ticket["ticket_id"]] = resp.json()["id"]
                    break
                if resp is not None and 400 <= resp.status_code < 500:
                    run.rejected.append(f"{ticket['ticket_id']}: {resp.status_code} {resp.text}")
                    break
                if time.monotonic() > deadline:
                    run.rejected.append(f"{ticket['ticket_id']}: no 202 within 120 s")
                    break
                run.submit_retries += 1
                await asyncio.sleep(0.3)

    async with httpx.AsyncClient(
        base_url=stack.api_url, timeout=10, headers=stack.api_headers
    ) as client:
        await asyncio.gather(*(client_loop(client) for _ in range(cfg.clients)))


async def inject_faults(cfg: Config, stack: Stack, run: Run, submitted: asyncio.Event) -> None:
    rng = random.Random(cfg.seed + 1)  # noqa: S311 - reproducible victims, not secrets
    t0 = time.monotonic()
    sqs_at, pg_at = t0 + 0.3 * cfg.fault_seconds, t0 + 0.6 * cfg.fault_seconds
    next_kill = t0 + cfg.kill_every
    submit_end: float | None = None
    while True:
        now = time.monotonic()
        if submitted.is_set() and submit_end is None:
            submit_end = now
        end = max(t0 + cfg.fault_seconds, (submit_end or math.inf) + 2 * cfg.kill_every)
        enough = run.sqs_restarts and run.pg_restarts and len(run.kills) >= cfg.min_kills
        # The second bound only stops a run whose kills cannot happen (no live worker):
        # its report then shows too few kills, and the test fails instead of hanging.
        if (now >= end and enough) or now >= end + (cfg.min_kills + 2) * cfg.kill_every:
            return
        if not run.sqs_restarts and now >= sqs_at:
            run.note(f"restarting the SQS server ({cfg.sqs}): its messages are lost")
            await asyncio.to_thread(stack.restart_sqs)
            run.sqs_restarts += 1
            run.last_fault = time.monotonic()
            run.note("SQS server back, queues created again")
        elif not run.pg_restarts and now >= pg_at:
            run.note("restarting PostgreSQL")
            await asyncio.to_thread(stack.restart_postgres)
            run.pg_restarts += 1
            run.last_fault = time.monotonic()
            run.note("PostgreSQL back")
        elif now >= next_kill:
            kill = stack.kill_worker(rng)
            # From now, not from the schedule: after a restart that took longer than
            # kill_every, the kills it delayed come one by one, not all at once.
            next_kill = now + cfg.kill_every
            if kill:
                run.kills.append(kill)
                run.last_fault = time.monotonic()
                run.note(
                    f"SIGKILL {kill['worker']} (pid {kill['pid']}), started {kill['replacement']}"
                )
        for dead in stack.exited():
            run.exits.append(dead)
            run.note(f"[yellow]exited unbidden:[/] {dead}")
        await asyncio.sleep(0.1)


async def poll_counts(database: db.Database, run: Run) -> None:
    """The counts by state for the display; the database may be down for a moment."""
    with contextlib.suppress(errors.StoreError, TimeoutError):
        rows = await asyncio.wait_for(
            database.fetch("SELECT state::text AS state, count(*) AS n FROM jobs GROUP BY state"), 2
        )
        run.counts = {r["state"]: int(r["n"]) for r in rows}


async def drain(
    database: db.Database, stack: Stack, run: Run, ids: list[str], within: float
) -> bool:
    """Wait until every job in ``ids`` is succeeded, dead_lettered or cancelled."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        with contextlib.suppress(errors.StoreError, TimeoutError):
            row = await asyncio.wait_for(
                database.fetch_one(
                    "SELECT count(*) AS n FROM jobs"
                    " WHERE id = ANY(%(ids)s::uuid[]) AND state::text = ANY(%(final)s)",
                    {"ids": ids, "final": list(FINAL)},
                ),
                5,
            )
            if row and int(row["n"]) == len(ids):
                return True
        for dead in stack.exited():
            run.exits.append(dead)
            run.note(f"[yellow]exited unbidden:[/] {dead}")
        await asyncio.sleep(0.5)
    return False


def display(cfg: Config, run: Run) -> Group:
    counts = Table(title=f"tasklease chaos · {run.phase}", title_justify="left")
    states = [s.value for s in JobState]
    for s in states:
        counts.add_column(s, justify="right")
    counts.add_row(*(str(run.counts.get(s, 0)) for s in states))
    faults = (
        f"acked {len(run.acked)}/{cfg.jobs}   kills {len(run.kills)}   "
        f"sqs restarts {run.sqs_restarts}   pg restarts {run.pg_restarts}   "
        f"elapsed {time.monotonic() - run.started:.0f} s"
    )
    return Group(counts, faults)


async def progress(cfg: Config, database: db.Database, run: Run, stop: asyncio.Event) -> None:
    if err.is_terminal:
        with Live(display(cfg, run), console=err, refresh_per_second=4, transient=True) as live:
            while not stop.is_set():
                await poll_counts(database, run)
                live.update(display(cfg, run))
                await asyncio.sleep(0.5)
        return
    last = 0.0
    while not stop.is_set():
        await poll_counts(database, run)
        if time.monotonic() - last >= 5:
            last = time.monotonic()
            counts = " ".join(f"{k}={v}" for k, v in sorted(run.counts.items()))
            run.note(f"{run.phase}: acked {len(run.acked)}/{cfg.jobs}  {counts}")
        await asyncio.sleep(0.5)


async def orchestrate(cfg: Config, stack: Stack, run: Run) -> dict[str, Any]:
    payloads, tags = tickets(cfg)
    database = db.Database(stack.database_url, min_size=1, max_size=3)
    await database.open()
    stop_display = asyncio.Event()
    shown = asyncio.create_task(progress(cfg, database, run, stop_display))
    try:
        run.phase = "submitting, with faults"
        run.mark("faults_started")
        submitted = asyncio.Event()
        faults = asyncio.create_task(inject_faults(cfg, stack, run, submitted))
        await submit_all(cfg, stack, run, payloads)
        submitted.set()
        run.mark("submitted")
        run.note(f"{len(run.acked)} of {cfg.jobs} jobs acknowledged ({run.submit_retries} retries)")
        run.phase = "faults continue"
        await faults
        run.mark("faults_ended")
        run.phase = "draining"
        ids = list(run.acked.values())
        drained = await drain(database, stack, run, ids, cfg.drain_timeout)
        if run.last_fault is not None:
            run.timings["time_to_drain_after_last_fault"] = round(
                time.monotonic() - run.last_fault, 2
            )
        run.mark("drained")
        run.note("drained" if drained else f"[red]not drained within {cfg.drain_timeout:.0f} s[/]")
        first = await dead_letter_causes(database)

        run.phase = "redriving transient dead letters"
        run.note("restarting the workers with TASKLEASE_FAKE_MODEL_TRANSIENT_RATE=0")
        await asyncio.to_thread(stack.restart_workers, {"TASKLEASE_FAKE_MODEL_TRANSIENT_RATE": "0"})
        redriven = await redrive_transient(stack, database)
        run.note(f"redriven {len(redriven)} dead letters with tasklease's own redrive")
        run.phase = "draining the redriven jobs"
        redrained = await drain(database, stack, run, ids, cfg.drain_timeout)
        run.mark("redrained")
        run.note(
            "drained" if redrained else f"[red]not drained within {cfg.drain_timeout:.0f} s[/]"
        )
        facts = await gather_facts(database, stack)
    finally:
        stop_display.set()
        await shown
        await database.close()
    report = check(
        submitted=cfg.jobs, acked=run.acked, tags=tags, redriven=redriven, kills=run.kills, **facts
    )
    report["dead_letters_after_first_drain"] = first
    return report


async def redrive_transient(stack: Stack, database: db.Database) -> list[str]:
    """The dead letters whose cause was transient, back through app.redrive (the DLQ
    walk: the dead letters are moved, the attempt budgets restart)."""
    from app.services import redrive

    assert stack.urls is not None
    ids = [r["id"] for r in await database.fetch(TRANSIENT_DEAD_LETTERS)]
    if not ids:
        return []
    settings = stack._settings().model_copy(
        update={
            "queue_url": stack.urls.queue_url,
            "dlq_url": stack.urls.dlq_url,
            "database_url": stack.database_url,
        }
    )
    sqs = queue.Queue(settings)
    await sqs.open()
    try:
        report = await redrive.redrive(settings, database, sqs, job_ids=ids)
    finally:
        await sqs.close()
    return [str(r["id"]) for r in report.selected]


async def dead_letter_causes(database: db.Database) -> dict[str, int]:
    rows = await database.fetch("SELECT last_error FROM jobs WHERE state = 'dead_lettered'")
    return dict(Counter(cause(r["last_error"]) for r in rows))


def cause(last_error: str | None) -> str:
    text = last_error or ""
    if text.startswith("permanent:"):
        return "permanent (tag)" if "[permanent] tag" in text else "permanent (injected)"
    if text.startswith("worker never finished"):
        return "worker never finished"
    if text.startswith("attempts used up"):
        return "attempts used up"
    return "other"


async def gather_facts(database: db.Database, stack: Stack) -> dict[str, Any]:
    jobs = await database.fetch(
        "SELECT id::text AS id, state::text AS state, attempt, max_attempts, payload, result,"
        " last_error, redrives FROM jobs"
    )
    events = await database.fetch(
        "SELECT job_id::text AS job_id, at, from_state::text AS from_state,"
        " to_state::text AS to_state, attempt, worker, detail FROM job_events ORDER BY job_id, id"
    )
    effects = await database.fetch(
        "SELECT job_id::text AS job_id, key, attempt, recorded_at FROM effects"
    )
    dup_rows = await database.fetch(
        "SELECT job_id, key FROM effects GROUP BY job_id, key HAVING count(*) > 1"
    )
    log = stack.dir / "model-calls.jsonl"
    calls = [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []
    async with httpx.AsyncClient(timeout=30) as client:
        resp = await client.get(f"{stack.hook_url}/deliveries")
        deliveries = resp.json()["deliveries"]
    return {
        "jobs": jobs,
        "events": events,
        "effects": effects,
        "duplicated_effect_rows": len(dup_rows),
        "model_calls": calls,
        "deliveries": deliveries,
    }


# --- the checker ----------------------------------------------------------------


def _ts(value: Any) -> dt.datetime:
    return value if isinstance(value, dt.datetime) else dt.datetime.fromisoformat(str(value))


def classify_repeats(
    deliveries: list[dt.datetime],
    events: list[dict[str, Any]],
    recorded_attempt: int | None,
    kills: list[dict[str, Any]],
) -> tuple[int, int, Counter[str]]:
    """Split one webhook key's extra deliveries into effect-window repeats and duplicates.

    Each attempt runs from its ``running`` event to the job's next event. A delivery
    made by an attempt that never recorded the effect, one per attempt and with no
    other attempt running at the same time, is DESIGN.md's documented window (the
    outside call happened, the insert did not). Anything else is a duplicate.
    """
    extra = len(deliveries) - 1
    if extra <= 0:
        return 0, 0, Counter()
    spans = []
    for i, e in enumerate(events):
        if e["to_state"] != JobState.RUNNING:
            continue
        end = (
            _ts(events[i + 1]["at"])
            if i + 1 < len(events)
            else dt.datetime.max.replace(tzinfo=dt.UTC)
        )
        spans.append((_ts(e["at"]), end, e["attempt"], e["worker"]))
    per_span: Counter[int] = Counter()
    for t in deliveries:
        hit = [k for k, (a, b, _, _) in enumerate(spans) if a <= t < b]
        per_span[hit[0] if hit else -1] += 1
    if per_span[-1] or any(n > 1 for n in per_span.values()):
        return 0, extra, Counter()
    causes: Counter[str] = Counter()
    for k, n in per_span.items():
        start, end, attempt, worker = spans[k]
        if n == 1 and attempt != recorded_attempt:
            killed = any(x["worker"] == worker and start <= _ts(x["at"]) <= end for x in kills)
            causes["worker killed" if killed else "attempt cut short otherwise"] += 1
    window = min(extra, sum(causes.values()))
    return window, extra - window, causes


def model_repeats(
    model_calls: list[dict[str, Any]], kills: list[dict[str, Any]]
) -> tuple[int, int]:
    """Extra successful model calls per key: (made by a process killed right after, other)."""
    killed_at = {int(k["pid"]): _ts(k["at"]) for k in kills}
    ok: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for c in model_calls:
        if c["outcome"] == "ok":
            ok[str(c["key"])].append(c)
    window = other = 0
    for calls in ok.values():
        for c in sorted(calls, key=lambda c: _ts(c["at"]))[:-1]:
            death = killed_at.get(int(c["pid"]))
            if death is not None and death >= _ts(c["at"]):
                window += 1
            else:
                other += 1
    return window, other


def check(
    *,
    submitted: int,
    acked: dict[str, str],
    tags: dict[str, str],
    redriven: list[str],
    jobs: list[dict[str, Any]],
    events: list[dict[str, Any]],
    effects: list[dict[str, Any]],
    duplicated_effect_rows: int,
    model_calls: list[dict[str, Any]],
    deliveries: list[dict[str, Any]],
    kills: list[dict[str, Any]],
) -> dict[str, Any]:
    """Jepsen's queue checker, for tasklease's invariants. Pure: facts in, report out."""
    by_id = {j["id"]: j for j in jobs}
    ticket_of = {job_id: tid for tid, job_id in acked.items()}
    events_of: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for e in events:
        events_of[e["job_id"]].append(e)
    effects_of: dict[str, dict[str, dict[str, Any]]] = defaultdict(dict)
    for f in effects:
        effects_of[f["job_id"]][f["key"]] = f
    calls_of: dict[str, Counter[str]] = defaultdict(Counter)
    for c in model_calls:
        calls_of[str(c["key"])][str(c["outcome"])] += 1
    delivered: dict[str, list[dt.datetime]] = defaultdict(list)
    for d in deliveries:
        delivered[str(d["idempotency_key"])].append(_ts(d["at"]))

    states: Counter[str] = Counter()
    lost: list[dict[str, Any]] = []
    unexpected: list[dict[str, str]] = []

    def odd(job_id: str, why: str) -> None:
        unexpected.append({"job_id": job_id, "ticket": ticket_of.get(job_id, "?"), "why": why})

    for job_id in acked.values():
        job = by_id.get(job_id)
        if job is None:
            lost.append({"job_id": job_id, "state": None})
            continue
        state = job["state"]
        states[state] += 1
        tag = tags.get(ticket_of.get(job_id, ""), "")
        if state not in {s.value for s in JobState}:
            odd(job_id, f"unknown state {state!r}")
        elif state not in FINAL:
            lost.append({"job_id": job_id, "state": state})
        if state == JobState.SUCCEEDED:
            fx = effects_of.get(job_id, {})
            if set(fx) != {"triage", "post"}:
                odd(job_id, f"succeeded with effects {sorted(fx)}")
            if not (job["result"] or {}).get("delivered"):
                odd(job_id, "succeeded but its result says the reply was not delivered")
            if not delivered.get(f"{job_id}:post"):
                odd(job_id, "succeeded but the webhook never received its reply")
            if not calls_of[f"{job_id}:triage"]["ok"]:
                odd(job_id, "succeeded with no successful model call in the call log")
            if tag == "[permanent]":
                odd(job_id, "tagged [permanent] but succeeded")
        elif state == JobState.DEAD_LETTERED and cause(job["last_error"]) not in (
            "permanent (tag)",
            "permanent (injected)",
        ):
            odd(
                job_id,
                f"still dead-lettered after a redrive with the cause gone: {job['last_error']}",
            )
        elif state == JobState.CANCELLED:
            odd(job_id, "cancelled, and nobody cancelled it")
        segment_attempts: set[int] = set()
        for e in events_of.get(job_id, []):
            if e["from_state"] == JobState.DEAD_LETTERED:
                segment_attempts = set()
            if e["to_state"] == JobState.RUNNING:
                segment_attempts.add(e["attempt"])
                if len(segment_attempts) > job["max_attempts"]:
                    odd(job_id, f"ran more attempts than its budget of {job['max_attempts']}")
                    break

    completions = Counter(e["job_id"] for e in events if e["to_state"] == JobState.SUCCEEDED)
    duplicated_completions = sorted(j for j, n in completions.items() if n > 1)

    window = duplicated = 0
    window_causes: Counter[str] = Counter()
    duplicated_keys = []
    for key, times in delivered.items():
        if len(times) < 2:
            continue
        job_id = key.removesuffix(":post")
        post = effects_of.get(job_id, {}).get("post")
        w, dup, c = classify_repeats(
            sorted(times), events_of.get(job_id, []), post["attempt"] if post else None, kills
        )
        window, duplicated, window_causes = window + w, duplicated + dup, window_causes + c
        if dup:
            duplicated_keys.append(key)

    model_window, model_duplicated = model_repeats(model_calls, kills)
    succeeded = [j for j in acked.values() if by_id.get(j, {}).get("state") == JobState.SUCCEEDED]
    ok_calls = [calls_of[f"{j}:triage"]["ok"] for j in succeeded]
    all_calls = [sum(c.values()) for c in calls_of.values()]
    report: dict[str, Any] = {
        "submitted": submitted,
        "acknowledged": len(acked),
        "succeeded": states[JobState.SUCCEEDED],
        "dead_lettered": states[JobState.DEAD_LETTERED],
        "cancelled": states[JobState.CANCELLED],
        "lost": len(lost),
        "duplicated_effects": duplicated_effect_rows + duplicated,
        "duplicated_completions": len(duplicated_completions),
        "unexpected": len(unexpected),
        "effect_window_repeats": window,
        "duplicated_effect_rows": duplicated_effect_rows,
        "duplicated_deliveries": duplicated,
        "redriven": len(redriven),
        "model_calls": {
            "total": len(model_calls),
            "by_outcome": dict(Counter(str(c["outcome"]) for c in model_calls)),
            "ok_per_effect_mean": round(sum(ok_calls) / len(ok_calls), 3) if ok_calls else 0,
            "ok_per_effect_max": max(ok_calls, default=0),
            "calls_per_effect_mean": round(sum(all_calls) / len(all_calls), 3) if all_calls else 0,
            "calls_per_effect_max": max(all_calls, default=0),
            "effects_with_more_than_one_ok_call": sum(1 for n in ok_calls if n > 1),
            # An answer the caller never recorded because we SIGKILLed it right after.
            "ok_repeats_after_a_kill": model_window,
            "ok_repeats_otherwise": model_duplicated,
        },
        "effect_window_repeats_by_cause": dict(window_causes),
        "dead_lettered_by_cause": dict(
            Counter(
                cause(by_id[j]["last_error"])
                for j in acked.values()
                if by_id.get(j, {}).get("state") == JobState.DEAD_LETTERED
            )
        ),
        "lost_jobs": lost[:50],
        "unexpected_jobs": unexpected[:50],
        "duplicated_completion_jobs": duplicated_completions[:50],
        "duplicated_delivery_keys": duplicated_keys[:50],
    }
    return report


def violated(report: dict[str, Any]) -> bool:
    keys = ("lost", "duplicated_effects", "duplicated_completions", "unexpected")
    return any(report[k] for k in keys) or report["acknowledged"] < report["submitted"]


def render(report: dict[str, Any]) -> Table:
    ok = not violated(report)
    table = Table(
        "check",
        "value",
        title=f"tasklease chaos: {'[green]valid[/]' if ok else '[red]INVALID[/]'}",
        title_justify="left",
    )

    def row(name: str, value: Any, bad: bool = False) -> None:
        table.add_row(name, f"[red]{value}[/]" if bad else str(value))

    for name in ("submitted", "acknowledged", "succeeded", "dead_lettered", "cancelled"):
        row(name, report[name])
    for name in ("lost", "duplicated_effects", "duplicated_completions", "unexpected"):
        row(name, report[name], bad=bool(report[name]))
    row("  effect rows recorded twice", report["duplicated_effect_rows"])
    row("  webhook deliveries duplicated", report["duplicated_deliveries"])
    row("effect window repeats (documented)", report["effect_window_repeats"])
    mc = report["model_calls"]
    row(
        "model calls per effect (ok) mean/max",
        f"{mc['ok_per_effect_mean']} / {mc['ok_per_effect_max']}",
    )
    row(
        "model calls per effect (all) mean/max",
        f"{mc['calls_per_effect_mean']} / {mc['calls_per_effect_max']}",
    )
    row("model calls by outcome", mc["by_outcome"])
    row(
        "repeated model answers: after a kill / other",
        f"{mc['ok_repeats_after_a_kill']} / {mc['ok_repeats_otherwise']}",
        bad=bool(mc["ok_repeats_otherwise"]),
    )
    row("dead letters after first drain", report["dead_letters_after_first_drain"])
    row(
        "redriven, then",
        f"{report['redriven']}  → final dead letters {report['dead_lettered_by_cause']}",
    )
    f = report["faults"]
    row(
        "faults",
        f"kills {f['kills']}, sqs restarts {f['sqs_restarts']}, pg restarts {f['pg_restarts']}",
    )
    if f["unbidden_exits"]:
        row("processes that exited unbidden", ", ".join(f["unbidden_exits"]), bad=True)
    t = report["timings"]
    row("time to drain after the last fault", f"{t.get('time_to_drain_after_last_fault', '?')} s")
    row("total", f"{t.get('total', '?')} s")
    for u in report["unexpected_jobs"][:10]:
        row("  unexpected", f"{u['ticket']} {u['job_id']}: {u['why']}", bad=True)
    for lost in report["lost_jobs"][:10]:
        row("  lost", f"{lost['job_id']} ({lost['state']})", bad=True)
    return table


def main(cfg: Config) -> int:
    warnings.filterwarnings("ignore", category=UserWarning, module="platformdirs")
    # The pool retries while PostgreSQL restarts; that is the fault, not news.
    logging.getLogger("psycopg.pool").setLevel(logging.ERROR)
    if cfg.sqs not in ("moto", "localstack"):
        err.print(f"[red]--sqs must be moto or localstack, not {cfg.sqs!r}[/]")
        return 2

    def interrupted(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    # Both, explicitly: a shell starts background jobs with SIGINT ignored.
    signal.signal(signal.SIGTERM, interrupted)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    stack = Stack(cfg)
    run = Run()
    try:
        stack.prepare_dir()
        with err.status("starting PostgreSQL, the SQS server, API, workers, sweeper…"):
            stack.start_servers()
            stack.start_processes()
        run.mark("started")
        run.note(
            f"stack up in {run.timings['started']:.1f} s: {cfg.workers} workers "
            f"({stack.slow_slots} slow), SQS {cfg.sqs} at {stack.endpoint}, logs in {stack.logs_dir}"
        )
        report = asyncio.run(orchestrate(cfg, stack, run))
    except Unavailable as exc:
        err.print(f"[red]unavailable:[/] {exc}")
        return EXIT_UNAVAILABLE
    except errors.ConfigError as exc:
        err.print(f"[red]configuration error:[/] {exc}")
        return 2
    except KeyboardInterrupt:
        err.print("interrupted: stopping everything")
        return EXIT_INTERRUPTED
    except Exception as exc:
        # A fault that could not be injected (or undone) ends the run; there is no verdict.
        (stack.dir / "chaos-error.txt").write_text(traceback.format_exc())
        err.print(f"[red]the chaos run could not complete:[/] {type(exc).__name__}: {exc}")
        err.print(f"traceback in {stack.dir / 'chaos-error.txt'}, logs in {stack.logs_dir}")
        return EXIT_ABORTED
    finally:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        try:
            stack.stop()
        finally:
            signal.signal(signal.SIGINT, signal.default_int_handler)
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
    run.mark("total")
    report["faults"] = {
        "kills": len(run.kills),
        "sqs_restarts": run.sqs_restarts,
        "pg_restarts": run.pg_restarts,
        "unbidden_exits": run.exits,
        "kill_log": run.kills,
    }
    report["timings"] = run.timings
    report["submit_retries"] = run.submit_retries
    report["rejected_submissions"] = run.rejected
    report["config"] = {k: str(v) for k, v in dataclasses.asdict(cfg).items()}
    report["slow_workers"] = stack.slow_slots
    report["valid"] = not violated(report)
    (stack.dir / "report.json").write_text(json.dumps(report, indent=2, default=str))
    out.print(render(report))
    out.print(f"report: {stack.dir / 'report.json'}", highlight=False)
    return EXIT_VIOLATED if violated(report) else EXIT_OK
