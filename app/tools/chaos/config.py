"""A chaos run's settings, its exit codes, and the record of what happened during it."""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as dt
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from rich.console import Console

err = Console(stderr=True)
out = Console()

EXIT_OK, EXIT_VIOLATED, EXIT_UNAVAILABLE, EXIT_ABORTED, EXIT_INTERRUPTED = 0, 1, 3, 4, 130


# The chaos sweeper's prune: small batches, one per pass, so the history's prune spans
# the faults (a PostgreSQL restart, kills) instead of ending in the first pass.
PRUNE_BATCH = 20

# The deploy of demo.revised's version 2 (faults.py), as a share of the fault phase.
DEPLOY_AT = 0.45


@dataclasses.dataclass(frozen=True)
class Config:
    jobs: int = 200
    # This share of the jobs is waiting work (naps, approvals, fan-outs: workload.py);
    # the rest are support.triage tickets.
    waiting: float = 0.3
    # This share are agent runs (demo.agent, demo.openai_agent: Pydantic AI and OpenAI
    # Agents SDK agents against the fake model server, its own process); 0: none, and
    # the run needs neither the pydantic-ai nor the openai-agents extra.
    agents: float = 0.1
    # Of the jobs, this many are demo.chat (the harness sends them messages: messaging.py),
    # this many are given a deadline they cannot meet (demo.nap, demo.sleep), and this
    # many are demo.publish (published state); all within --jobs (revisions too).
    chats: int = 6
    deadlines: int = 4
    publishes: int = 3
    # Of the jobs, this many are demo.revised, half submitted first to nap across the
    # deploy of its version 2, half last (workload.py).
    revisions: int = 6
    # Keyed work (issue 35; keyed.py), within --jobs: this many conversations, each sent
    # this many demo.converse messages at once (one run per conversation at a time), the
    # last conversation once the faults are over; this many documents, each edited in two
    # bursts of this many demo.reindex jobs (debounced 2 s: the last of a burst runs).
    conversations: int = 4
    messages: int = 3
    documents: int = 2
    edits: int = 3
    workers: int = 3
    # The tenant's running cap (TASKLEASE_MAX_RUNNING_PER_TENANT): below the workers'
    # slots (3 x 2), so claims are deferred all through the run.
    max_running: int = 4
    transport: str = "sqs"  # sqs | redis: the carrier (TASKLEASE_TRANSPORT)
    sqs: str = "moto"  # moto | localstack (on SQS)
    # On Redis: the restarts of its server (faults.py). "aof": it runs with the append-only
    # file (appendfsync everysec) and is SIGKILLed and started again once; "none": no
    # persistence, the restart loses every stream, group, pending and delayed entry;
    # "both": AOF on for a first restart, then off for a second one.
    redis_persistence: str = "both"
    transient_rate: float = 0.2
    permanent_rate: float = 0.05
    # The fake answers 429 (Retry-After: 1) to this share of its calls: throttles use no
    # attempt, so they change nothing the checker expects but the time.
    throttle_rate: float = 0.1
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
    # Finished jobs of 40 days ago written before the run, which the sweeper prunes in
    # batches of PRUNE_BATCH while the faults run (retention, issue 18).
    history_jobs: int = 300

    @property
    def keyed_jobs(self) -> int:
        """The keyed work's jobs: the conversations' messages and the documents' edits."""
        return self.conversations * self.messages + self.documents * 2 * self.edits


@dataclasses.dataclass
class Run:
    """What happened, as the run goes: faults, timings, acknowledgements."""

    started: float = dataclasses.field(default_factory=time.monotonic)
    # The wall clock at the start, to place the store's timestamps on the run's timings.
    started_at: dt.datetime = dataclasses.field(default_factory=lambda: dt.datetime.now(dt.UTC))
    phase: str = "starting"
    acked: dict[str, str] = dataclasses.field(default_factory=dict)  # ref -> job id
    # The harness's answers to approvals: ref -> what happened (callbacks.py).
    answers: dict[str, dict[str, Any]] = dataclasses.field(default_factory=dict)
    # The harness's messages to demo.chat jobs: ref -> what they met (messaging.py).
    sent: dict[str, dict[str, Any]] = dataclasses.field(default_factory=dict)
    submit_retries: int = 0
    rejected: list[str] = dataclasses.field(default_factory=list)
    kills: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    sqs_restarts: int = 0
    redis_restarts: int = 0
    # Each carrier restart: what it lost and how long until the carrier held a message
    # again for every job waiting on one (recovery.py).
    carrier_restarts: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    # Each server restart, deploy and restart of the workers, wall clock (ISO) from and to:
    # with the kills, the windows in which a wait for a free key is excused (keyed.py).
    outages: list[dict[str, str]] = dataclasses.field(default_factory=list)
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

    @contextlib.contextmanager
    def outage(self, what: str) -> Iterator[None]:
        """Records the window of a restart or deploy done inside it (``outages``)."""
        start = dt.datetime.now(dt.UTC).isoformat()
        try:
            yield
        finally:
            end = dt.datetime.now(dt.UTC).isoformat()
            self.outages.append({"what": what, "from": start, "to": end})

    def elapsed(self) -> float:
        """Seconds since the run started, as its timings and notes count them."""
        return round(time.monotonic() - self.started, 2)

    def mark(self, name: str) -> None:
        self.timings[name] = self.elapsed()
