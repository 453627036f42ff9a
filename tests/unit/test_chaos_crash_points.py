"""The chaos stack's crash points inside an agent's step (app/tools/chaos/stack.py): two
worker slots carry one each until a worker dies there; that death is a kill the run
counts, another death is a worker that exited unbidden; each is replaced."""

from __future__ import annotations

import signal
from pathlib import Path
from typing import Any

import pytest

from app.tools.chaos.config import Config
from app.tools.chaos.stack import AGENT_CRASH_STEPS, ChaosStack

pytestmark = pytest.mark.unit


class Dead:
    """A worker process that has exited, with its log."""

    def __init__(self, name: str, log: Path, text: str) -> None:
        self.name, self.pid, self.returncode, self.log_path = name, 42, -signal.SIGKILL, log
        log.write_text(text)

    def poll(self) -> int:
        return self.returncode


def test_a_worker_dead_at_its_crash_point_is_a_kill_and_its_slot_carries_it_no_more(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    stack = ChaosStack(Config(workers=3, data_dir=tmp_path))
    stack.crash_points = {2: f"inside_effect@{AGENT_CRASH_STEPS[0]}", 1: "inside_effect@x"}
    started: list[int] = []

    def start_slot(slot: int) -> str:
        started.append(slot)
        return f"w{slot}-new"

    monkeypatch.setattr(stack, "start_slot", start_slot)
    hit = '{"message": "crash point inside_effect reached: SIGKILL"}\n'
    workers: dict[int, Any] = {
        2: Dead("w2-1", tmp_path / "w2.log", hit),
        1: Dead("w1-1", tmp_path / "w1.log", "killed by the OOM killer\n"),
    }
    stack.workers = workers
    assert stack.exited_unbidden() == ["w1-1 (exit -9)"]
    assert sorted(started) == [1, 2]
    assert [(k["worker"], k["point"], k["replacement"]) for k in stack.crashed] == [
        ("w2-1", f"inside_effect@{AGENT_CRASH_STEPS[0]}", "w2-new")
    ]
    assert stack.crash_points == {1: "inside_effect@x"}  # slot 1's point has not fired


def test_a_deploy_restarts_every_worker_on_the_new_module_and_counts_a_crash_point_death(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    stack = ChaosStack(Config(workers=2, data_dir=tmp_path))
    stack.env = {"TASKLEASE_KINDS": "app.demos,app.demos.revised_v1,app.demos.agent"}
    stack.crash_points = {1: "inside_effect@x"}
    stopped: list[str] = []
    monkeypatch.setattr(
        stack, "stop_processes", lambda procs: stopped.extend(p.name for p in procs)
    )
    monkeypatch.setattr(stack, "start_slot", lambda slot: f"w{slot}-new")
    hit = '{"message": "crash point inside_effect reached: SIGKILL"}\n'
    workers: dict[int, Any] = {
        0: Dead("w0-1", tmp_path / "w0.log", "stopped by SIGTERM\n"),
        1: Dead("w1-1", tmp_path / "w1.log", hit),  # died there just before the deploy
    }
    stack.workers = workers
    stack.deploy("app.demos.revised_v1", "app.demos.revised_v2")
    assert stack.worker_env["TASKLEASE_KINDS"] == "app.demos,app.demos.revised_v2,app.demos.agent"
    assert stopped == ["w0-1", "w1-1"]
    assert [(k["worker"], k["point"], k["replacement"]) for k in stack.crashed] == [
        ("w1-1", "inside_effect@x", "w1-new")
    ]
    assert stack.crash_points == {}
