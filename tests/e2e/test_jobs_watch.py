"""`tasklease jobs watch` (issue 33) run as a real process against a real API process and a
real worker: `--json` prints a line per event of the jobs submitted while it runs (its
tenant's only), resumes with Last-Event-ID after the API is killed and started again, and
the live table (in a pseudo-terminal) shows a job's id and final state. Ctrl-C (SIGINT)
ends it with exit 0."""

from __future__ import annotations

import json
import os
import pty
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

import httpx
import pytest

from tests.conftest import ROOT, Stack, api_client, job_row, wait_for
from tests.e2e.test_cli_output import cli

# What it checks (the CLI against the API) does not depend on the carrier: moto only.
pytestmark = [pytest.mark.e2e, pytest.mark.carrier_neutral]

ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


class Output:
    """What a process writes, read on a thread as it comes."""

    def __init__(self, read: Callable[[], bytes]) -> None:
        self.chunks: list[bytes] = []
        self.thread = threading.Thread(target=self._pump, args=(read,), daemon=True)
        self.thread.start()

    def _pump(self, read: Callable[[], bytes]) -> None:
        while True:
            try:
                chunk = read()
            except OSError:  # the pseudo-terminal closed with the process
                return
            if not chunk:
                return
            self.chunks.append(chunk)

    def text(self) -> str:
        return b"".join(self.chunks).decode(errors="replace")


class Watcher:
    """`tasklease jobs watch ARGS` running, its stdout a pipe or a pseudo-terminal."""

    def __init__(self, stack: Stack, url: str, key: str, *args: str, tty: bool = False) -> None:
        env = {**stack.env, "TASKLEASE_API_URL": url, "TASKLEASE_API_KEY": key}
        command = [sys.executable, "-m", "app.cli", "jobs", "watch", *args]
        self.main: int | None = None
        if tty:
            self.main, child = pty.openpty()
            env |= {"COLUMNS": "220", "LINES": "40", "TERM": "xterm-256color"}
            self.proc = subprocess.Popen(
                command, env=env, cwd=ROOT, stdin=child, stdout=child, stderr=subprocess.PIPE
            )
            os.close(child)
            main = self.main
            self.out = Output(lambda: os.read(main, 65536))
        else:
            self.proc = subprocess.Popen(
                command, env=env, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE
            )
            stdout = self.proc.stdout
            assert stdout is not None
            self.out = Output(lambda: stdout.read1(65536))

    def stop(self) -> tuple[int, str]:
        """Ctrl-C (SIGINT): its exit code and what it wrote on stderr."""
        self.proc.send_signal(signal.SIGINT)
        _, err = self.proc.communicate(timeout=15)
        self.out.thread.join(timeout=5)
        if self.main is not None:
            os.close(self.main)
        return self.proc.returncode, err.decode()


def submit(http: httpx.Client, kind: str, payload: dict[str, Any] | None = None) -> str:
    answer = http.post("/v1/jobs", json={"kind": kind, "payload": payload or {}})
    assert answer.status_code == 202, answer.text
    return str(answer.json()["id"])


def events(out: Output) -> list[dict[str, Any]]:
    return [json.loads(line) for line in out.text().splitlines()]


def submitted_while_watching(http: httpx.Client, seen: Callable[[str], bool], kind: str) -> str:
    """A job submitted once the watcher follows the stream: the stream starts "now" when
    it connects, so jobs are submitted until one is seen from its submission."""
    for _ in range(15):
        job_id = submit(http, kind)
        deadline = time.monotonic() + 2
        while time.monotonic() < deadline:
            if seen(job_id):
                return job_id
            time.sleep(0.1)
    pytest.fail("the watcher showed none of 15 jobs submitted while it ran")


def test_watch_json_prints_each_event_of_its_tenants_jobs_and_resumes_after_a_drop(
    stack: Stack, sql: Any
) -> None:
    url = stack.api()
    api_proc = stack.procs[-1]
    key = stack.key("acme")
    acme = api_client(url, key)
    globex = api_client(url, stack.key("globex"))
    stack.worker()
    watcher = Watcher(stack, url, key, "--json")
    out = watcher.out

    def submission_seen(job_id: str) -> bool:
        return any(
            e["job_id"] == job_id and e["type"] == "transition" and e["data"]["from_state"] is None
            for e in events(out)
        )

    first = submitted_while_watching(acme, submission_seen, "demo.noop")
    other = submit(globex, "demo.noop")

    def transitions(job_id: str) -> list[tuple[str | None, str]]:
        return [
            (e["data"]["from_state"], e["data"]["to_state"])
            for e in events(out)
            if e["job_id"] == job_id and e["type"] == "transition"
        ]

    wait_for(lambda: ("running", "succeeded") in transitions(first), what="the job's success")
    recorded = acme.get(f"/v1/jobs/{first}/events").json()
    # A line per transition, as the job's timeline recorded them, in order.
    assert transitions(first) == [(e["from_state"], e["to_state"]) for e in recorded]
    assert all(e["tenant"] == "acme" and e["kind"] == "demo.noop" for e in events(out))
    wait_for(lambda: job_row(sql, other)["state"] == "succeeded", what="globex's job done")

    # The API is killed; a job submitted meanwhile (through the database) runs to its end;
    # the API comes back on the same address: the watcher resumes where it was.
    api_proc.kill()
    api_proc.wait()
    code, printed, err = cli(stack, "submit", "demo.noop", "--tenant", "acme")
    assert code == 0, err
    late = printed.strip()
    wait_for(lambda: job_row(sql, late)["state"] == "succeeded", what="the job done meanwhile")
    stack.start_api(int(url.rsplit(":", 1)[1]), name="api-again")
    wait_for(lambda: ("running", "succeeded") in transitions(late), what="the missed job shown")
    recorded = acme.get(f"/v1/jobs/{late}/events").json()
    assert transitions(late) == [(e["from_state"], e["to_state"]) for e in recorded]
    ids = [e["id"] for e in events(out)]
    assert len(ids) == len(set(ids)), "an event printed twice"
    assert other not in out.text()  # another tenant's job: never

    code, err = watcher.stop()
    assert code == 0 and "Traceback" not in err, err
    acme.close()
    globex.close()


def test_the_live_table_shows_the_jobs_of_its_kind_to_their_final_state(stack: Stack) -> None:
    url = stack.api()
    key = stack.key("ops", admin=True)
    http = api_client(url, key)
    stack.worker()
    watcher = Watcher(stack, url, key, "--kind", "demo.sleep", tty=True)
    out = watcher.out

    def shown() -> str:
        return ANSI.sub("", out.text())

    sleeper = submitted_while_watching(http, lambda job_id: job_id in shown(), "demo.sleep")
    noop = submit(http, "demo.noop")
    wait_for(
        lambda: any(
            sleeper in line and "succeeded" in line and "demo.sleep" in line
            for line in shown().splitlines()
        ),
        what="the job's row, succeeded",
        timeout=30,
    )
    wait_for(lambda: http.get(f"/v1/jobs/{noop}").json()["state"] == "succeeded", what="noop")
    assert "jobs moving at" in shown()
    code, err = watcher.stop()
    assert code == 0 and "Traceback" not in err, err
    assert noop not in shown()  # another kind: filtered out
    http.close()
