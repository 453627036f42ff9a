"""`make run` restarted (issue 30, item 6): the demo key outlives a restart, so an exported
TASKLEASE_API_KEY and an open web-view tab keep working; ``--new-key`` replaces it; and
``--reload`` restarts the processes that load the kinds when a kind's file changes.

One data directory and one kind module for the whole module: the first `make run`
(``--reload``) serves the reload test, a second (plain) the restart, a third ``--new-key``;
each test stops what runs before it starts its own.
"""

from __future__ import annotations

import json
import textwrap
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.conftest import bearer, wait_for
from tests.e2e.test_make_run import MakeRun, checkout_dir

pytestmark = pytest.mark.e2e

KIND = """
from pydantic import BaseModel, ConfigDict

from tasklease import JobContext, kind


class Payload(BaseModel):
    model_config = ConfigDict(extra="forbid")
{fields}

@kind("reload.echo")
async def echo(ctx: JobContext[None], p: Payload) -> dict[str, str]:
    return {result}
"""
BEFORE = KIND.format(fields="", result='{"says": "before"}')
# A field the first version's payload forbids (so the API must have reloaded to take it)
# and a result of another length (so no stale bytecode of the same size and second is used).
AFTER = KIND.format(fields="    word: str\n", result='{"says": p.word + ", after the edit"}')


@dataclass
class Runs:
    """The data directory, the kinds folder and the `make run` running now, if any."""

    cwd: Path
    kinds: Path
    current: MakeRun | None = None
    keys: list[str] = field(default_factory=list)  # each run's key, in order

    def start(self, *args: str, wait_for_workers: bool = True) -> MakeRun:
        self.stop()
        env = {"TASKLEASE_KINDS": "reload_kinds", "PYTHONPATH": str(self.kinds)}
        self.current = MakeRun(self.cwd, "--no-demo", *args, env=env)
        # "✓ settings" is said once dev.json (read below) is written; the API answers by then.
        self.current.wait_until("worker processes polling" if wait_for_workers else "✓ settings")
        saved = json.loads((self.cwd / ".tasklease" / "dev.json").read_text())
        self.keys.append(saved["env"]["TASKLEASE_API_KEY"])
        return self.current

    def stop(self) -> None:
        if self.current is not None and self.current.proc.poll() is None:
            assert self.current.interrupt() == 0, self.current.text()

    def kill(self) -> None:
        if self.current is not None:
            self.current.kill()


@pytest.fixture(scope="module")
def runs() -> Iterator[Runs]:
    with checkout_dir() as cwd:
        kinds = cwd / "kinds"
        kinds.mkdir()
        (kinds / "reload_kinds.py").write_text(textwrap.dedent(BEFORE))
        found = Runs(cwd, kinds)
        try:
            found.start("--reload")
            yield found
        finally:
            found.kill()


def url(run: MakeRun) -> str:
    return f"http://127.0.0.1:{run.api_port}"


def status(run: MakeRun, key: str) -> int:
    return httpx.get(f"{url(run)}/v1/me", headers=bearer(key), timeout=10).status_code


def run_job(run: MakeRun, key: str, payload: dict[str, Any]) -> dict[str, Any]:
    """Submit a reload.echo job and wait until it succeeds: its result."""
    sent = httpx.post(
        f"{url(run)}/v1/jobs",
        headers=bearer(key),
        json={"kind": "reload.echo", "payload": payload},
        timeout=10,
    )
    assert sent.status_code == 202, sent.text

    def done() -> dict[str, Any] | None:
        job = httpx.get(f"{url(run)}/v1/jobs/{sent.json()['id']}", headers=bearer(key)).json()
        assert job["state"] not in ("failed", "dead_lettered"), job
        return job if job["state"] == "succeeded" else None

    job = wait_for(done, what="the reload.echo job to succeed", timeout=60, interval=0.2)
    return dict(job["result"])


def test_reload_restarts_the_api_and_workers_when_a_kind_s_file_changes(runs: Runs) -> None:
    """`make run ARGS=--reload`: the kind edited while it runs is the code the next job
    runs (the workers restarted) and the schema the API validates it with (the API too)."""
    assert runs.current is not None
    run, key = runs.current, runs.keys[0]
    assert "reloads the API, the workers and the sweeper when a .py file changes" in run.text()
    assert run_job(run, key, {}) == {"says": "before"}

    (runs.kinds / "reload_kinds.py").write_text(textwrap.dedent(AFTER))
    run.wait_until("✓ reloaded", timeout=120)
    assert "↻ reload_kinds.py changed: restarting the API, 2 workers and the sweeper" in run.text()
    assert run_job(run, key, {"word": "hello"}) == {"says": "hello, after the edit"}
    assert "exited unexpectedly" not in run.text()


def test_a_restart_keeps_the_key_so_exported_keys_and_open_tabs_still_work(runs: Runs) -> None:
    """Before, every start revoked the previous run's key: the exported TASKLEASE_API_KEY
    and each open web-view tab got 401 after a restart."""
    first = runs.keys[0]
    run = runs.start(wait_for_workers=False)  # stops the first run as Ctrl-C does
    assert runs.keys[-1] == first
    assert f"export TASKLEASE_API_KEY={first}" in run.text()
    assert "the same key as the previous run" in run.text()
    assert status(run, first) == 200


def test_new_key_makes_a_new_key_and_revokes_the_kept_one(runs: Runs) -> None:
    first = runs.keys[0]
    run = runs.start("--new-key", wait_for_workers=False)
    new = runs.keys[-1]
    assert new != first and new.startswith("tlk_")
    assert "a new key (--new-key): the previous one is revoked" in run.text()
    assert status(run, first) == 401
    assert status(run, new) == 200
