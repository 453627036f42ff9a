"""CPU time of process trees, from /proc, read before and after a phase (issue 37).

A group (the API, the workers, the broker's server, PostgreSQL) is a set of root pids and
all their descendants: Celery's prefork children and PostgreSQL's backends are counted
with the process that started them. Each process counts utime + stime, its own threads'
included, plus cutime + cstime, its reaped children's: a child that exits during the
phase moves its time into its parent's counts and is not lost (nor counted twice).
A process that exits and is reaped by a process outside the group is lost; the phases
measured here start and stop none inside the window.
"""

from __future__ import annotations

import os
import time
import urllib.parse
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from app.tools.stack.stack import ROOT, localstack_endpoint

if TYPE_CHECKING:
    from bench.stack import BenchStack

TICK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def stat_fields(pid: int) -> list[str] | None:
    """``/proc/<pid>/stat`` after the command name (field 3 onward), or None."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None


def _children() -> dict[int, list[int]]:
    """Every live process's children, by parent pid (one pass over /proc)."""
    out: dict[int, list[int]] = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        fields = stat_fields(int(entry.name))
        if fields is not None:
            out.setdefault(int(fields[1]), []).append(int(entry.name))
    return out


def tree_cpu_s(roots: Iterable[int]) -> float | None:
    """The CPU seconds (user + system, reaped children's included) of these processes and
    all their descendants; None when no root is alive (or no /proc)."""
    roots = list(roots)
    if not roots or not Path("/proc/self/stat").exists():
        return None
    children = _children()
    seen: set[int] = set()
    todo = list(roots)
    total, alive = 0, False
    while todo:
        pid = todo.pop()
        if pid in seen:
            continue
        seen.add(pid)
        fields = stat_fields(pid)
        if fields is None:
            continue
        alive = alive or pid in roots
        total += sum(int(fields[i]) for i in (11, 12, 13, 14))  # utime stime cutime cstime
        todo += children.get(pid, [])
    return total / TICK if alive else None


SELF = -1  # a group's pid for this very process alone (its threads, not its children)


def _group_cpu_s(pids: list[int]) -> float | None:
    if pids == [SELF]:
        return time.process_time()  # the benchmark's children (the stack) left out
    return tree_cpu_s(pids)


class CpuMeter:
    """CPU of named groups of process trees between ``start`` and ``ms_per_job``; a group
    ``[SELF]`` is this process alone (a producer running in the benchmark's process)."""

    def __init__(self, groups: Mapping[str, Iterable[int | None]]) -> None:
        self.groups = {k: [p for p in v if p] for k, v in groups.items()}
        self.base: dict[str, float | None] = {}
        self.t0 = 0.0

    def start(self) -> CpuMeter:
        self.base = {k: _group_cpu_s(v) for k, v in self.groups.items()}
        self.t0 = time.monotonic()
        return self

    def seconds(self) -> dict[str, float | None]:
        now = {k: _group_cpu_s(v) for k, v in self.groups.items()}
        out: dict[str, float | None] = {}
        for k, v in now.items():
            b = self.base.get(k)
            out[k] = None if v is None or b is None else max(0.0, v - b)
        return out

    def ms_per_job(self, jobs: int | Mapping[str, int]) -> dict[str, Any]:
        """Each group's CPU ms per job (``jobs`` a number, or one per group), and the
        window's wall seconds."""
        out: dict[str, Any] = {}
        for k, s in self.seconds().items():
            n = jobs if isinstance(jobs, int) else jobs.get(k, 0)
            out[f"{k}_cpu_ms"] = round(s * 1000 / n, 3) if s is not None and n else None
        out["window_s"] = round(time.monotonic() - self.t0, 2)
        return out


def _pidfile(path: Path) -> int | None:
    try:
        return int(path.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def broker_server_pids(stack: BenchStack) -> list[int]:
    """The carrier's server: moto's process, the embedded redis-server, or host-mode
    LocalStack (from localstack/run.sh's pid file); none for a server given by URL."""
    for server in (stack.redis if stack.on_redis else stack.moto,):
        if server is not None and server.proc is not None:
            return [server.proc.pid]
    if not stack.on_redis and stack.sqs == "localstack":
        port = urllib.parse.urlsplit(localstack_endpoint()).port or 4566
        name = "localstack.pid" if port == 4566 else f"localstack-{port}.pid"
        pid = _pidfile(ROOT / ".localstack" / name)
        return [pid] if pid else []
    return []


def pg_server_pids(stack: BenchStack) -> list[int]:
    """The embedded PostgreSQL's postmaster (its backends are its children)."""
    if stack.postgres is None:
        return []
    pid = _pidfile(stack.postgres.data_dir / "postmaster.pid")
    return [pid] if pid else []


def tasklease_groups(stack: BenchStack) -> dict[str, list[int]]:
    """tasklease's processes in a phase: the API, the workers, the carrier's server, the
    counting proxy (the benchmark's own, reported apart) and PostgreSQL."""
    api = [p.pid for p in stack.procs if getattr(p, "name", "") == "api"]
    return {
        "api": api,
        "workers": [p.pid for p in stack.workers],
        **peer_groups(stack),
    }


def peer_groups(stack: BenchStack) -> dict[str, list[int]]:
    """The servers every system of the run shares: the carrier's, the proxy, PostgreSQL."""
    return {
        "broker_server": broker_server_pids(stack),
        "proxy": [stack.proxy.pid] if stack.proxy is not None else [],
        "pg_server": pg_server_pids(stack),
    }
