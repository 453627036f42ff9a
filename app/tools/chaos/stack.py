"""The chaos run's stack: the shared local stack in a data directory of its own (wiped
at each run), with workers in slots that can be killed and replaced, and servers
that can be restarted under the running system."""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import os
import random
import shutil
import signal
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from app import crashpoints, errors
from app.demos import agent as demo_agent
from app.demos import revised
from app.settings import config
from app.settings.config import Settings
from app.tools.chaos.config import PRUNE_BATCH, Config
from app.tools.stack import embedded
from app.tools.stack.stack import ROOT, Process, Stack
from app.transport import QueueUrls

# The agent kinds (app/demos/agent.py): named beside the demos when the run has agent jobs.
AGENT_KINDS = "app.demos.agent"
# The steps of an agent run inside which a worker is made to die (the outside call made,
# its record not written: the effect window), each carried by one worker slot until it
# fires: a Pydantic AI run's second tool call (the fake model names its calls
# call_<n>_<name>) and an OpenAI Agents SDK run's third model request. The random
# SIGKILLs seldom land inside a step that short.
AGENT_CRASH_STEPS = (
    f"{demo_agent.KEY}:tool:{demo_agent.TOOLS[1]}:call_2_{demo_agent.TOOLS[1]}",
    f"{demo_agent.OPENAI_KEY}:model:2",
)
# Then, each slot in turn once its agent point has fired: a worker dead as it took a
# message (the receive's record written), as it published state, as it was about to end
# a running job at its deadline. The API's and the sweeper's points are not armed: a
# service that dies is a process exited unbidden.
THEN_CRASH_AT = (
    (crashpoints.Point.AFTER_MESSAGE_TAKEN.value, crashpoints.Point.BEFORE_DEADLINE_END.value),
    (crashpoints.Point.AFTER_STATE_PUBLISHED.value,),
)
MARKER = ".tasklease-chaos"  # only a directory holding this file is ever wiped
# Waits on a short clock: a timer longer than this delay cap is woken through the
# sweeper (as one longer than SQS's 15 minutes is on AWS), and a wake-up lost with the
# broker is re-sent this long after it was due.
MAX_MESSAGE_DELAY_SECONDS = 2
WAKE_GRACE_SECONDS = 3.0
# The sweeper's pass, and how long after its last send a waiting job with no message
# is given one again (after a broker restart).
SWEEP_INTERVAL_SECONDS = 1.0
LOST_MESSAGE_SECONDS = 8.0


class Unavailable(errors.TaskleaseError):
    """A server the chaos run needs could not start."""


class ChaosStack(Stack):
    """Every process of one chaos run; each is stopped by its pid, never by name."""

    def __init__(self, cfg: Config) -> None:
        self.cfg = cfg
        self.dir = cfg.data_dir.resolve()
        super().__init__(self.dir / "logs")
        self.queue_name = f"tl-chaos-{uuid.uuid4().hex[:8]}"
        self.urls: QueueUrls | None = None
        self.services: dict[str, Process] = {}  # api, sweeper, webhook
        self.workers: dict[int, Process] = {}  # slot -> its current process
        self.generation = 0
        self.worker_env: dict[str, str] = {}
        self.api_headers: dict[str, str] = {}
        self.hook_url = ""
        self.agent_model_url = ""  # the fake model server the agent runs talk to
        # slot -> the crash point its processes carry until one dies there
        self.crash_points: dict[int, str] = {}
        # slot -> the crash points it carries next, in turn, once its point fired
        self.later_points: dict[int, list[str]] = {}
        self.crashed: list[dict[str, Any]] = []  # those deaths, as kills, for the run

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
            ours = (b"app.cli", b"app.tools.fakemodel", b"moto.server", b"redis-server")
            if any(name in cmdline for name in ours):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)

    def _save_pids(self) -> None:
        pids = [p.pid for p in self.procs if p.poll() is None]
        for server in (self.moto, self.redis):
            if server is not None and server.proc is not None:
                pids.append(server.proc.pid)
        (self.dir / "pids.json").write_text(json.dumps(pids))

    def launch(
        self,
        name: str,
        args: list[str],
        env: Mapping[str, str] | None = None,
        *,
        cwd: Path = ROOT,
    ) -> Process:
        proc = super().launch(name, args, env, cwd=cwd)
        self._save_pids()
        return proc

    @property
    def on_redis(self) -> bool:
        return self.cfg.transport == "redis"

    @property
    def carrier_name(self) -> str:
        return (
            f"Redis at {self.redis_url}"
            if self.on_redis
            else f"SQS {self.cfg.sqs} at {self.endpoint}"
        )

    def start_servers(self) -> None:
        """PostgreSQL, the carrier's server (SQS's, or an embedded Redis of the run's own,
        which it can restart), the queues, the migrations. Raises Unavailable."""
        try:
            self.start_postgres(self.dir / "pgdata")
        except Exception as exc:
            raise Unavailable(f"embedded PostgreSQL could not start: {exc}") from exc
        if self.on_redis:
            # Never TASKLEASE_REDIS_URL's server: the run SIGKILLs and restarts its Redis.
            try:
                self.start_redis(appendonly=self.cfg.redis_persistence != "none")
            except errors.TaskleaseError as exc:
                raise Unavailable(f"the embedded Redis could not start: {exc}") from exc
            self._save_pids()
        else:
            try:
                self.start_sqs(self.cfg.sqs)
            except errors.TaskleaseError as exc:
                raise Unavailable(
                    f"the SQS server ({self.cfg.sqs}) could not start: {exc}"
                ) from exc
        self.urls = self.create_queues(self.settings(), self.queue_name)

    def settings(self) -> Settings:
        """The settings of this run's queues (and, once created, their URLs and database)."""
        carrier: dict[str, object] = (
            {"transport": "redis", "redis_url": self.redis_url} if self.on_redis else {}
        )
        s = config.load(
            queue_name=self.queue_name, visibility_timeout_seconds=self.cfg.visibility, **carrier
        )
        if self.urls is None:
            return s
        update = {**self.urls.settings(), "database_url": self.database_url}
        return s.model_copy(update=update)

    def start_processes(self) -> None:
        assert self.urls is not None
        cfg = self.cfg
        hook_port = embedded.free_port()
        self.hook_url = f"http://127.0.0.1:{hook_port}"
        self.env = {
            # On Redis, an SQS endpoint nothing calls: no process reaches AWS by mistake.
            **self.process_env(self.urls, self.queue_name, self.endpoint or "http://127.0.0.1:9"),
            "TASKLEASE_VISIBILITY_TIMEOUT_SECONDS": str(cfg.visibility),
            "TASKLEASE_WAIT_TIME_SECONDS": "1",
            "TASKLEASE_BACKOFF_BASE_SECONDS": "0.5",
            "TASKLEASE_BACKOFF_CAP_SECONDS": "2",
            "TASKLEASE_OUTBOX_GRACE_SECONDS": "1",
            "TASKLEASE_SWEEP_INTERVAL_SECONDS": f"{SWEEP_INTERVAL_SECONDS:g}",
            "TASKLEASE_PRUNE_BATCH_SIZE": str(PRUNE_BATCH),
            "TASKLEASE_PRUNE_BATCHES_PER_SWEEP": "1",
            # After the broker restart the sweeper re-sends the messages of waiting jobs.
            "TASKLEASE_LOST_MESSAGE_SECONDS": f"{LOST_MESSAGE_SECONDS:g}",
            # A message SQS moves to the DLQ itself is reconciled within the run.
            "TASKLEASE_DLQ_SCAN_INTERVAL_SECONDS": "5",
            "TASKLEASE_MAX_MESSAGE_DELAY_SECONDS": str(MAX_MESSAGE_DELAY_SECONDS),
            "TASKLEASE_WAKE_GRACE_SECONDS": str(WAKE_GRACE_SECONDS),
            "TASKLEASE_MODEL_PROVIDER": "fake",
            "TASKLEASE_FAKE_MODEL_LOG": str(self.dir / "model-calls.jsonl"),
            "TASKLEASE_FAKE_MODEL_LATENCY_MS": "50",
            "TASKLEASE_FAKE_MODEL_PERMANENT_RATE": str(cfg.permanent_rate),
            "TASKLEASE_FAKE_MODEL_THROTTLE_RATE": str(cfg.throttle_rate),
            "TASKLEASE_FAKE_MODEL_RETRY_AFTER_SECONDS": "1",
            "TASKLEASE_WEBHOOK_URL": f"{self.hook_url}/hook",
            "TASKLEASE_LOG_LEVEL": "INFO",
            # Chaos submits as fast as its clients go; the limits are tested elsewhere.
            "TASKLEASE_RATE_LIMIT_PER_SECOND": "100000",
            "TASKLEASE_RATE_LIMIT_BURST": "1000000",
            "TASKLEASE_MAX_RUNNING_PER_TENANT": str(cfg.max_running),
            "TASKLEASE_RUNNING_CAP_DELAY_SECONDS": "0.5",
            "PYTHONWARNINGS": "ignore::UserWarning",
        }
        self.api_headers = {
            "Authorization": "Bearer " + self.create_key("chaos", "tasklease chaos")
        }
        self.worker_env = {"TASKLEASE_FAKE_MODEL_TRANSIENT_RATE": str(cfg.transient_rate)}
        # demo.revised, version 1 everywhere; the deploy moves the workers to version 2.
        self.name_kinds(revised.V1_MODULE)
        if cfg.agents > 0:
            self.start_agent_model()
        self.start_webhook(hook_port, self.dir / "webhook-deliveries.jsonl")
        self.services["webhook"] = self.procs[-1]
        self.start_api()
        self.services["api"] = self.procs[-1]
        self.services["sweeper"] = self.start_sweeper()
        for slot in range(cfg.workers):
            self.start_slot(slot)

    def start_agent_model(self) -> None:
        """The agent runs' model: the fake model server, a process beside the stack logging
        every request (the checker's witness), and the agent kind named for every process."""
        self.agent_model_url = self.start_fake_model(self.agent_model_log, name="agent-model")
        self._save_pids()
        self.env["DEMO_AGENT_BASE_URL"] = self.agent_model_url
        slots = range(self.cfg.workers - 1, -1, -1)  # the last first: slot 0 may be slow
        points = (f"{crashpoints.Point.INSIDE_EFFECT.value}@{k}" for k in AGENT_CRASH_STEPS)
        self.crash_points = dict(zip(slots, points, strict=False))
        self.later_points = {
            s: list(then) for s, then in zip(self.crash_points, THEN_CRASH_AT, strict=False)
        }
        self.name_kinds(AGENT_KINDS)

    def name_kinds(self, module: str) -> None:
        """Every process started from now serves the kinds of ``module`` too."""
        self.env["TASKLEASE_KINDS"] = ",".join(
            k for k in (self.env.get("TASKLEASE_KINDS"), module) if k
        )

    @property
    def agent_model_log(self) -> Path:
        return self.dir / "agent-model.jsonl"

    # workers

    @property
    def slow_slots(self) -> int:
        """Workers whose model calls outlast the visibility timeout (see the module note)."""
        if self.cfg.slow_rate <= 0:
            return 0
        return max(1, min(self.cfg.workers, round(self.cfg.slow_rate * self.cfg.workers)))

    def start_slot(self, slot: int) -> str:
        self.generation += 1
        name = f"w{slot}-{self.generation}"
        latency = self.cfg.visibility * 1000 + 1500 if slot < self.slow_slots else 50
        env = {**self.worker_env, "TASKLEASE_FAKE_MODEL_LATENCY_MS": str(latency)}
        if slot in self.crash_points:
            env["TASKLEASE_CRASH_AT"] = self.crash_points[slot]
            env["TASKLEASE_ALLOW_CRASH_POINTS"] = crashpoints.CONSENT
        self.workers[slot] = self.start_worker(name, concurrency=2, env=env)
        return name

    def kill_worker(self, rng: random.Random) -> dict[str, Any] | None:
        alive = [(s, p) for s, p in sorted(self.workers.items()) if p.poll() is None]
        if not alive:
            return None
        slot, proc = rng.choice(alive)
        at = dt.datetime.now(dt.UTC)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        new = self.start_slot(slot)
        return {"at": at.isoformat(), "worker": proc.name, "pid": proc.pid, "replacement": new}

    def restart_workers(self, extra: dict[str, str]) -> None:
        """Every worker stopped (SIGTERM: batches in hand finish), then started with
        ``extra``. One that had died at its slot's crash point meanwhile is a kill."""
        self.worker_env.update(extra)
        old = dict(self.workers)
        self.stop_processes(list(old.values()))
        for slot, proc in old.items():
            crashed = self._crashed_there(slot, proc)
            name = self.start_slot(slot)
            if crashed is not None:
                self.crashed.append({**crashed, "replacement": name})

    def deploy(self, old: str, new: str) -> None:
        """A deploy: every worker restarted serving the kinds of module ``new`` instead of
        those of ``old`` (the API and the sweeper run no kind's code: they keep ``old``)."""
        named = self.env["TASKLEASE_KINDS"].split(",")
        kinds = ",".join(new if k == old else k for k in named)
        self.restart_workers({"TASKLEASE_KINDS": kinds})

    def exited_unbidden(self) -> list[str]:
        """Processes that died without being killed; workers get a replacement. A worker
        that died at its slot's crash point is a kill (``crashed``), not among them."""
        dead = []
        for slot, proc in list(self.workers.items()):
            if proc.poll() is None:
                continue
            crashed = self._crashed_there(slot, proc)
            if crashed is not None:
                self.crashed.append({**crashed, "replacement": self.start_slot(slot)})
                continue
            dead.append(f"{proc.name} (exit {proc.returncode})")
            self.start_slot(slot)
        for name, proc in list(self.services.items()):
            if proc.poll() is not None:
                dead.append(f"{name} (exit {proc.returncode})")
                del self.services[name]
        return dead

    def _crashed_there(self, slot: int, proc: Process) -> dict[str, Any] | None:
        """The kill, if ``proc`` (slot's, exited) died at its slot's crash point; the
        slot then carries its next point, if any."""
        if slot not in self.crash_points or b"crash point" not in proc.log_path.read_bytes():
            return None
        point = self.crash_points.pop(slot)
        if self.later_points.get(slot):
            self.crash_points[slot] = self.later_points[slot].pop(0)
        at = dt.datetime.now(dt.UTC).isoformat()
        return {"at": at, "worker": proc.name, "pid": proc.pid, "point": point}

    # faults on the servers

    def restart_sqs(self) -> None:
        if self.moto is not None:
            self.moto.stop()
            self.moto.start()
            self._save_pids()
        else:
            self.localstack("restart")
        urls = self.create_queues(self.settings(), self.queue_name)
        if urls != self.urls:
            raise errors.TaskleaseError(f"the queues came back under new URLs: {urls}")

    def redis_streams(self) -> list[str]:
        """The source streams (the priorities' queues) of this run."""
        assert self.urls is not None
        urls = (self.urls.queue_url, self.urls.queue_url_high, self.urls.queue_url_low)
        return [u for u in urls if u]

    def restart_redis(self, *, appendonly: bool) -> None:
        """SIGKILL redis-server (what it had not written to its AOF is gone; without one,
        everything is), then start it again on its port and data directory, with the AOF
        on or off. Nothing is created again here: the carrier makes its consumer groups
        again itself (on NOGROUP), the sweeper re-sends what was lost."""
        assert self.redis is not None
        self.redis.kill()
        self.redis.appendonly = appendonly
        self.redis.start()
        self._save_pids()

    def restart_postgres(self) -> None:
        assert self.postgres is not None
        self.postgres.stop()
        url = self.postgres.start()
        if url != self.database_url:
            raise errors.TaskleaseError(f"PostgreSQL came back at another URL: {url}")

    # shutdown

    def stop(self) -> None:
        super().stop()
        with contextlib.suppress(OSError):
            (self.dir / "pids.json").unlink()
