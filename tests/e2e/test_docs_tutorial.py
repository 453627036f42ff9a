"""The tutorial (docs/tutorial.md) as a reader follows it, so the page cannot go stale.

Its code and commands are files under docs/snippets/tutorial/, included into the page
verbatim (pymdownx.snippets). Here they run as written: the kind and its unit test from
a fresh folder outside the repository, where the kind imports only ``tasklease``; then
the first shell's ``tasklease dev`` (with free ports added) and the second shell's
commands, in bash, against that real stack (embedded PostgreSQL, moto's SQS server, the
API and worker processes), with the checkout's environment activated as the page says.
"""

from __future__ import annotations

import ast
import contextlib
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import wait_for

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]
SNIPPETS = ROOT / "docs" / "snippets" / "tutorial"
PAGE = ROOT / "docs" / "tutorial.md"
BIN = Path(sys.executable).parent  # the checkout's .venv/bin: "activated"
KIND_FILES = ("greet.py", "test_greet.py", "client.py")
ALLOWED_ROOTS = {"tasklease", "pydantic", "pytest", "greet", "__future__"}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def shell_env(home: Path) -> dict[str, str]:
    """A fresh shell with the checkout's environment activated: no tasklease setting, no
    SQS endpoint, no PYTHONPATH; HOME is the temporary home the tutorial's ~/greet is in."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("TASKLEASE_", "AWS_ENDPOINT_URL", "OTEL_"))
        and k not in ("XDG_RUNTIME_DIR", "PYTHONPATH", "VIRTUAL_ENV")
    }
    env["HOME"] = str(home)
    env["PATH"] = f"{BIN}:{env.get('PATH', '/usr/bin:/bin')}"
    env["VIRTUAL_ENV"] = str(BIN.parent)
    return env


@contextlib.contextmanager
def home_with_greet() -> Iterator[Path]:
    """A home directory with ~/greet holding the tutorial's files, as a reader makes it:
    outside the repository (others may traverse it: as root, the embedded PostgreSQL
    runs as its own user)."""
    home = Path(tempfile.mkdtemp(prefix="tasklease-tutorial-"))
    home.chmod(0o755)
    folder = home / "greet"
    folder.mkdir(mode=0o755)
    for name in KIND_FILES:
        shutil.copy(SNIPPETS / name, folder / name)
    try:
        yield home
    finally:
        shutil.rmtree(home, ignore_errors=True)


def imported_roots(path: Path) -> set[str]:
    return imported_roots_of(path.read_text())


def imported_roots_of(code: str) -> set[str]:
    roots: set[str] = set()
    for node in ast.walk(ast.parse(code)):
        if isinstance(node, ast.Import):
            roots.update(a.name.split(".")[0] for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            roots.add(node.module.split(".")[0])
    return roots


def test_the_page_includes_every_snippet_it_runs() -> None:
    page = PAGE.read_text()
    for name in (*KIND_FILES, "run.sh", "submit.sh", "again.sh"):
        assert f'--8<-- "docs/snippets/tutorial/{name}"' in page, name


def test_the_kind_and_its_test_import_only_tasklease_of_the_project() -> None:
    stdlib = set(sys.stdlib_module_names)
    for name in KIND_FILES:
        outside = imported_roots(SNIPPETS / name) - stdlib - ALLOWED_ROOTS
        assert not outside, f"{name} imports {outside}: a kind imports only tasklease"
        assert "app" not in imported_roots(SNIPPETS / name)


def test_the_kinds_unit_test_passes_in_a_folder_outside_the_repository() -> None:
    """`python -m pytest -q test_greet.py` in ~/greet, as the tutorial says: run_kind
    runs the kind in memory, crashes it and replays it."""
    with home_with_greet() as home:
        done = subprocess.run(
            [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "test_greet.py"],
            cwd=home / "greet",
            env=shell_env(home),
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "4 passed" in done.stdout, done.stdout


def shell_lines(name: str) -> str:
    return (SNIPPETS / name).read_text()


class FirstShell:
    """run.sh, the tutorial's first shell, with free ports and its own data directory
    added to its `tasklease dev` line."""

    def __init__(self, home: Path) -> None:
        self.api_port, self.sqs_port = free_port(), free_port()
        script = shell_lines("run.sh").rstrip("\n")
        assert script.splitlines()[-1].endswith("tasklease dev --no-demo"), script
        script += f" --sqs moto --api-port {self.api_port} --sqs-port {self.sqs_port}"
        self.output = home / "first-shell.out"
        with self.output.open("wb") as out:
            self.proc = subprocess.Popen(
                ["bash", "-c", "set -euo pipefail\n" + script],
                cwd=home,
                env=shell_env(home),
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

    def text(self) -> str:
        return self.output.read_text()

    def wait_until(self, needle: str, timeout: float = 180) -> None:
        def seen() -> bool:
            assert self.proc.poll() is None, f"tasklease dev exited:\n{self.text()}"
            return needle in self.text()

        wait_for(seen, what=f"tasklease dev to print {needle!r}", timeout=timeout)

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGINT)  # Ctrl-C, as the tutorial ends it
            try:
                self.proc.wait(90)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(30)


def second_shell(home: Path, script: str) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        ["bash", "-c", "set -euo pipefail\n" + script],
        cwd=home,
        env=shell_env(home),
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, f"stdout:\n{done.stdout}\nstderr:\n{done.stderr}"
    return done


def json_documents(text: str) -> list[object]:
    """The JSON documents in a shell's output, in order (curl prints no newline after)."""
    decoder, docs, at = json.JSONDecoder(), [], 0
    while at < len(text):
        if text[at] in "{[":
            try:
                doc, at = decoder.raw_decode(text, at)
            except json.JSONDecodeError:  # a bracket in a table or a note, not JSON
                at += 1
                continue
            docs.append(doc)
        else:
            at += 1
    return docs


def test_the_tutorials_commands_run_against_a_real_stack() -> None:
    """The first shell starts the stack with TASKLEASE_KINDS=greet; the second submits
    with curl and the Python client, watches, replays an Idempotency-Key, is refused a
    bad payload and dead-letters a permanent failure. Each greeting is delivered once."""
    with home_with_greet() as home:
        first = FirstShell(home)
        try:
            first.wait_until("worker processes polling")
            watched = second_shell(home, shell_lines("submit.sh"))
            client = second_shell(home, 'cd ~/greet\neval "$(tasklease env)"\npython client.py\n')
            again = second_shell(
                home,
                'cd ~/greet\neval "$(tasklease env)"\nAUTH="Authorization: Bearer '
                '$TASKLEASE_API_KEY"\n' + shell_lines("again.sh"),
            )
            outbox = (home / "greet" / "greetings.txt").read_text().splitlines()
        finally:
            first.stop()
        stopped = first.text()

    job = json_documents(watched.stdout)[0]
    assert isinstance(job, dict)
    assert job["kind"] == "tutorial.greet"
    job_id = job["id"]
    assert "event: end" in watched.stdout, watched.stdout
    docs = json_documents(watched.stdout[watched.stdout.index("event: end") :])
    detail = next(d for d in docs if isinstance(d, dict) and d.get("id") == job_id)
    assert detail["state"] == "succeeded", detail
    assert detail["result"] == {"message": "Hello, Ada!", "delivery": f"{job_id}:deliver"}
    effects = next(d for d in docs if isinstance(d, list))
    assert [e["key"] for e in effects] == ["compose", "deliver"]
    assert watched.stdout.count(job_id) >= 3  # the stream, the job, jobs show

    assert client.stdout.splitlines()[-1].startswith("succeeded"), client.stdout
    assert "Hello, Grace!" in client.stdout

    replay = json_documents(again.stdout)[0]
    assert isinstance(replay, dict) and replay["id"] == job_id  # the same job
    assert re.search(r"^422$", again.stdout, re.M), again.stdout
    assert "exit status 1" in again.stdout, again.stdout
    assert "nobody to greet" in again.stdout + again.stderr

    assert outbox.count(f"{job_id}:deliver Hello, Ada!") == 1, outbox
    assert sum("Hello, Grace!" in line for line in outbox) == 1, outbox
    assert not any("nobody" in line for line in outbox), outbox
    assert "jobs and keys are kept in" in stopped, stopped


def test_the_readmes_kind_runs_from_a_folder_outside_the_repository() -> None:
    """README.md's ten-line kind, as a reader pastes it into a module of their own: it
    imports only tasklease (and pydantic) and passes run_kind."""
    readme = (ROOT / "README.md").read_text()
    match = re.search(r"```python\n(.*?)```", readme, re.S)
    assert match, "README.md: no python block"
    code = match.group(1)
    assert imported_roots_of(code) <= {"tasklease", "pydantic"}, code
    test = (
        "import asyncio\nfrom tasklease.testing import run_kind\nimport ack_kind\n\n"
        "run = asyncio.run(run_kind(ack_kind.ack, {'subject': 'Refund'}))\n"
        "assert run.result == 'We got your ticket: Refund', run.result\n"
        "assert run.ran == ['reply'], run.ran\nprint('ok')\n"
    )
    with home_with_greet() as home:
        (home / "ack_kind.py").write_text(code)
        (home / "check.py").write_text(test)
        done = subprocess.run(
            [sys.executable, "check.py"],
            cwd=home,
            env=shell_env(home),
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stdout + done.stderr
