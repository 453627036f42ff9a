"""`make run` (``tasklease dev``, as the Makefile runs it) as a real process: what a second
shell can do while it runs, taken ports, when its workers are ready, and what it prints
when its output is not a terminal or it is interrupted.

Every run here has its own data directory and free ports (flags), so it never meets a
`make run` of the developer's or another test's; only the defaults test uses the default
ports, and skips when they are busy unless CI is "true".
"""

from __future__ import annotations

import contextlib
import http.server
import json
import os
import re
import shutil
import signal
import socket
import socketserver
import stat
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from app import errors
from app.tools.stack import embedded
from app.tools.stack.stack import ROOT
from tests.conftest import Stack, wait_for

pytestmark = pytest.mark.e2e

TASKLEASE = str(Path(sys.executable).with_name("tasklease"))
DEFAULT_PORTS = {"--api-port": 8000, "--sqs-port": 9324}  # docs/index.md "What make run shows"


def port_in_use(port: int) -> bool:
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return True
    return False


def clean_env(**extra: str) -> dict[str, str]:
    """The caller's environment as a fresh shell has it: no tasklease settings, no SQS
    endpoint and no XDG_RUNTIME_DIR (CI's)."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("TASKLEASE_", "AWS_ENDPOINT_URL")) and k != "XDG_RUNTIME_DIR"
    }
    return {**env, **extra}


@contextlib.contextmanager
def checkout_dir() -> Iterator[Path]:
    """A directory to run `make run` in, as a checkout would be: others may traverse it
    (as root, the embedded PostgreSQL runs as its own user, and pytest's tmp_path is
    private to root)."""
    path = Path(tempfile.mkdtemp(prefix="tasklease-make-run-"))
    path.chmod(0o755)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def workdir() -> Iterator[Path]:
    with checkout_dir() as path:
        yield path


class MakeRun:
    """``tasklease dev`` in the background, its output in a file."""

    def __init__(self, cwd: Path, *args: str, env: dict[str, str] | None = None) -> None:
        self.cwd = cwd
        self.api_port = embedded.free_port()
        self.sqs_port = embedded.free_port()
        self.output = cwd / "make-run.out"
        with self.output.open("wb") as out:
            self.proc = subprocess.Popen(
                [
                    TASKLEASE,
                    "dev",
                    "--sqs",
                    "moto",
                    "--data-dir",
                    ".tasklease",
                    *args,
                    "--api-port",
                    str(self.api_port),
                    "--sqs-port",
                    str(self.sqs_port),
                ],
                cwd=cwd,
                stdout=out,
                stderr=subprocess.STDOUT,
                env=clean_env(**(env or {})),
                start_new_session=True,
            )

    def text(self) -> str:
        return self.output.read_text()

    def wait_until(self, needle: str, timeout: float = 180) -> None:
        def seen() -> bool:
            assert self.proc.poll() is None, f"make run exited:\n{self.text()}"
            return needle in self.text()

        wait_for(seen, what=f"make run to print {needle!r}", timeout=timeout)

    def interrupt(self) -> int:
        """Ctrl-C: SIGINT to its process group, as a terminal sends it."""
        os.killpg(self.proc.pid, signal.SIGINT)
        return self.proc.wait(120)

    def kill(self) -> None:
        """SIGTERM (it stops its own processes, which run in sessions of their own), then
        SIGKILL to whatever of its group is left."""
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(30)


@pytest.fixture(scope="module")
def running() -> Iterator[MakeRun]:
    """One `make run` (no demo jobs) for the second-shell tests; the last test interrupts it.
    The demo kinds are named, as `make run` names them, so the documentation's second
    shell can submit support.triage: --no-demo leaves them out since they are kinds like
    any user's (issue 29)."""
    with checkout_dir() as path:
        run = MakeRun(path, "--no-demo", env={"TASKLEASE_KINDS": "app.demos"})
        try:
            run.wait_until("worker processes polling")
            yield run
        finally:
            run.kill()


def readme_second_shell_block() -> str:
    """The documentation's commands for a second shell (docs/index.md, "What make run
    shows"), exactly as the reader copies them."""
    page = (ROOT / "docs" / "index.md").read_text()
    section = page.split("### From a second shell", 1)[1]
    match = re.search(r"```bash\n(.*?)```", section, re.S)
    assert match, "docs/index.md: no bash block under '### From a second shell'"
    return match.group(1)


def json_documents(text: str) -> list[Any]:
    """The JSON documents curl printed one after another (with no newline between)."""
    decoder, docs, at = json.JSONDecoder(), [], 0
    while at < len(text.rstrip()):
        doc, at = decoder.raw_decode(text, at)
        docs.append(doc)
        while at < len(text) and text[at].isspace():
            at += 1
    return docs


def test_the_docs_second_shell_commands_work_against_a_running_make_run(
    running: MakeRun,
) -> None:
    """Issue 13 item 6: from a second shell, `uv run tasklease keys create --tenant t`
    failed with "TASKLEASE_DATABASE_URL must be set" and the README's exports could not
    be followed. The block (docs/index.md since the README moved into the docs) runs
    verbatim, in a shell with no tasklease setting and no uv on PATH, in the directory
    `make run` runs in (its .venv is the checkout's)."""
    written = running.cwd / ".tasklease" / "dev.json"
    assert stat.S_IMODE(written.stat().st_mode) == 0o600
    # A new shell: no uv on PATH (issue 30, item 3: the block's `uv run` failed there with
    # "uv: command not found"), no activated venv; the checkout's .venv is where make put it.
    (running.cwd / ".venv").unlink(missing_ok=True)
    (running.cwd / ".venv").symlink_to(ROOT / ".venv")
    path = [d for d in os.environ["PATH"].split(os.pathsep) if not (Path(d) / "uv").exists()]
    env = clean_env(PATH=os.pathsep.join(path))
    env.pop("VIRTUAL_ENV", None)
    assert (
        "uv"
        not in subprocess.run(
            ["bash", "-c", "type -t uv || true"], env=env, capture_output=True, text=True
        ).stdout
    )
    script = "set -euo pipefail\n" + readme_second_shell_block()
    done = subprocess.run(
        ["bash", "-c", script],
        cwd=running.cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, f"stdout:\n{done.stdout}\nstderr:\n{done.stderr}"
    note = "using the running `make run` stack's settings from .tasklease/dev.json"
    assert done.stderr.count(note) == 2, done.stderr  # jobs list, keys create; then env vars
    assert re.search(r"^tlk_\S+$", done.stdout, re.M), done.stdout  # the new tenant's key
    docs = json_documents(done.stdout[done.stdout.index('{"id"') :])
    job, events, effects, dead, me = docs
    assert job["kind"] == "support.triage"
    assert job["payload"]["ticket_id"] == "T-77"
    assert events and events[0]["to_state"] == "queued"
    assert isinstance(effects, list)
    assert isinstance(dead, dict | list)
    assert me["tenant"] == "demo"


def test_make_run_prints_the_metrics_urls_of_the_api_and_each_worker(running: MakeRun) -> None:
    """Issue 15: `make run` says where the API's and each worker's /metrics are, and each
    answers in Prometheus' text format."""
    (line,) = [x for x in running.text().splitlines() if "metrics" in x and "/metrics" in x]
    urls = re.findall(r"http://127\.0\.0\.1:\d+/metrics", line)
    assert len(urls) == 3, line  # the API and the 2 workers
    for url in urls:
        resp = httpx.get(url, timeout=10)
        assert resp.status_code == 200, url
        assert "tasklease_pg_round_trips_total" in resp.text, url


def test_tasklease_env_prints_plain_export_lines_for_the_running_stack(running: MakeRun) -> None:
    """Issue 13 item 6: `eval "$(uv run tasklease env)"` gets the stack's settings, each on
    one line however long, with the ports `make run` was given."""
    done = subprocess.run(
        [TASKLEASE, "env"],
        cwd=running.cwd,
        env=clean_env(COLUMNS="40"),
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    lines = done.stdout.splitlines()
    assert all(line.startswith("export ") for line in lines), done.stdout
    exported = dict(line.removeprefix("export ").split("=", 1) for line in lines)
    assert exported["TASKLEASE_API_URL"] == f"http://127.0.0.1:{running.api_port}"
    assert exported["AWS_ENDPOINT_URL_SQS"] == f"http://127.0.0.1:{running.sqs_port}"
    assert exported["TASKLEASE_QUEUE_URL"].startswith(f"http://127.0.0.1:{running.sqs_port}/")
    assert {"TASKLEASE_DATABASE_URL", "TASKLEASE_DLQ_URL", "TASKLEASE_API_KEY"} <= set(exported)


def test_ctrl_c_says_what_stopped_and_where_the_data_is_kept(running: MakeRun) -> None:
    """Issue 13 item 9: Ctrl-C printed nothing. It names what it stopped and where the data
    stays, and removes the state file so no later command uses a stack that is gone."""
    assert running.interrupt() == 0
    text = running.text()
    assert "stopped the API, 2 workers, the sweeper and the webhook receiver" in text
    assert f"jobs and keys are kept in {running.cwd / '.tasklease' / 'pgdata'}" in text
    assert not (running.cwd / ".tasklease" / "dev.json").exists()
    # And a command from that directory now says nothing about it and asks for settings.
    done = subprocess.run(
        [TASKLEASE, "keys", "list", "--tenant", "demo"],
        cwd=running.cwd,
        env=clean_env(),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2
    assert "TASKLEASE_DATABASE_URL" in done.stderr


def test_a_state_file_left_by_a_killed_make_run_is_not_used(tmp_path: Path) -> None:
    """Issue 13 item 6: a `make run` killed with SIGKILL leaves its file; the CLI says it
    ignores it instead of talking to servers that are gone."""
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    (tmp_path / ".tasklease").mkdir()
    (tmp_path / ".tasklease" / "dev.json").write_text(
        json.dumps(
            {"pid": dead.pid, "env": {"TASKLEASE_DATABASE_URL": "postgresql://x@127.0.0.1:1/gone"}}
        )
    )
    done = subprocess.run(
        [TASKLEASE, "keys", "list", "--tenant", "demo"],
        cwd=tmp_path,
        env=clean_env(),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2
    assert "ignoring .tasklease/dev.json: the `make run` that wrote it" in done.stderr


class _NotFound(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        self.send_response(404)
        self.end_headers()
        self.wfile.write(b"not here")

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def other_server() -> Iterator[int]:
    """Another program's HTTP server on a port: it answers every request with a 404."""
    server = socketserver.TCPServer(("127.0.0.1", 0), _NotFound)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield int(server.server_address[1])
    finally:
        server.shutdown()
        server.server_close()


@pytest.mark.parametrize("flag", ["--api-port", "--sqs-port"])
def test_make_run_with_a_port_taken_says_so_and_changes_nothing(
    tmp_path: Path, other_server: int, flag: str
) -> None:
    """Issue 13 item 7: with port 8000 taken, `make run` printed "✓ API" (another server's
    404 passed its health check), rotated the demo key and died 27 s later with a
    traceback. Now it stops first: exit 2, naming the port and the flag; nothing started."""
    free = str(embedded.free_port())
    ports = {"--api-port": free, "--sqs-port": free, flag: str(other_server)}
    done = subprocess.run(
        [TASKLEASE, "dev", "--data-dir", ".tasklease", "--exit-when-done"]
        + [arg for pair in ports.items() for arg in pair],
        cwd=tmp_path,
        env=clean_env(),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 2, done.stdout + done.stderr
    assert f"port {other_server} is in use; use `make run ARGS='{flag} N'`" in done.stdout
    assert "Traceback" not in done.stdout + done.stderr
    assert not (tmp_path / ".tasklease" / "pgdata").exists()  # nothing was started


def test_the_api_readiness_check_refuses_another_servers_answer(other_server: int) -> None:
    """Issue 13 item 7: a health check that takes any answer took another server's 404
    for the API; the API's check wants /healthz's own body."""
    with pytest.raises(errors.TaskleaseError, match="not the expected server's"):
        embedded.wait_for_http(
            f"http://127.0.0.1:{other_server}/healthz",
            timeout=1,
            accept=embedded.json_answer(lambda doc: doc == {"status": "ok"}),
        )


def test_a_worker_is_ready_only_once_it_polls_the_queue(stack: Stack) -> None:
    """Issue 13 item 8: `make run` said "✓ 2 worker processes" while they were still
    starting, and the demo jobs sat queued for seconds. A worker counts as ready once it
    polls: not while its queue is unreachable, and as soon as it polls a reachable one."""
    port = embedded.free_port()
    nowhere = (
        {"TASKLEASE_REDIS_URL": f"redis://127.0.0.1:{port}/0"}
        if stack.on_redis
        else {"AWS_ENDPOINT_URL_SQS": f"http://127.0.0.1:{port}"}
    )
    stuck = stack.worker(env=nowhere, name="stuck")
    wait_for(
        lambda: "queue not reachable yet" in stuck.log_path.read_text(),
        what="the stuck worker to find its queue unreachable",
        timeout=60,
    )
    assert stack.polling() == (0, 1)
    stack.worker(name="polling")
    wait_for(lambda: stack.polling() == (1, 2), what="the second worker to poll", timeout=60)
    assert stuck.poll() is None  # still alive, still not ready


def _make_run_piped(cwd: Path, *ports: str) -> subprocess.CompletedProcess[str]:
    """`make run ARGS=--exit-when-done | tee`: its output a pipe, not a terminal."""
    return subprocess.run(
        [TASKLEASE, "dev", "--sqs", "moto", "--data-dir", ".tasklease", "--exit-when-done", *ports],
        cwd=cwd,
        env=clean_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=400,
        check=False,
    )


@pytest.fixture(scope="module")
def piped() -> Iterator[subprocess.CompletedProcess[str]]:
    """One `make run ARGS=--exit-when-done | tee` for the tests that read its output."""
    with checkout_dir() as path:
        ports = ["--api-port", str(embedded.free_port()), "--sqs-port", str(embedded.free_port())]
        yield _make_run_piped(path, *ports)


def test_make_run_piped_ends_its_table_before_the_next_sentence(
    piped: subprocess.CompletedProcess[str],
) -> None:
    """Issue 13 items 9 and 8: piped into tee, the final table's border ran into the next
    sentence (`…┘all demo jobs settled.`) and every run printed `RuntimeDirWarning:
    XDG_RUNTIME_DIR is not set`; the workers are reported when they poll, and the jobs
    waited for them meanwhile."""
    done = piped
    assert done.returncode == 0, done.stdout
    lines = done.stdout.splitlines()
    assert "RuntimeDirWarning" not in done.stdout
    bottom = [line for line in lines if "┘" in line]
    assert bottom and all(line.rstrip().endswith("┘") for line in bottom), done.stdout
    assert any(line.startswith("all demo jobs settled.") for line in lines), done.stdout
    assert "✓ 2 worker processes polling the queue" in lines, done.stdout
    # No job runs while the last word on the workers was that none of them polls yet.
    workers_said = ""
    for line in lines:
        if line.startswith(("waiting for workers", "✓ 2 worker processes")):
            workers_said = line
        if " running (runs" in line:
            assert workers_said and "(0/2 polling)" not in workers_said, done.stdout


TOKEN = r"tlcb_[A-Za-z0-9_-]{20,}"
APPROVAL_LINES = re.compile(
    r"^⏸ the research job (?P<job>[0-9a-f-]{36}) waits for approval .*\n"
    rf"^  curl -X POST http://127\.0\.0\.1:\d+/v1/callbacks/(?P<token>{TOKEN}) "
    r"-H 'content-type: application/json' -d '\{\"result\": \{\"approved\": true\}\}'\n"
    r"^  or\n"
    r"^  (?:\S*/)?\.venv/bin/tasklease callbacks complete (?P=token) --result '\{\"approved\": true\}'$",
    re.MULTILINE,
)


def test_make_run_shows_a_job_waiting_for_approval_and_the_lines_that_approve_it(
    piped: subprocess.CompletedProcess[str],
) -> None:
    """Issue 14: the demo's agent.research job waits for a person; once its notice reaches
    the webhook receiver, the curl and CLI lines that approve it are printed, whole, one
    line each. With --exit-when-done nobody answers, so the demo approves it itself (it
    does not hang) and the job goes on to succeed: slept until its quiet hour, posted."""
    out = piped.stdout
    assert piped.returncode == 0, out
    found = APPROVAL_LINES.search(out)
    assert found, out
    lines = out.splitlines()
    # Runs and attempts as the API counts them: each wait ended a run, and gave its
    # attempt back (issue 30, item 9: a waiting job showed "0/3" and nothing of its runs).
    assert any(
        re.fullmatch(r"research succeeded \(runs [2-9], attempts used 1/3\)", line)
        for line in lines
    ), out
    row = next(line for line in lines if line.startswith(f"│ {found['job']} │ research"))
    assert "succeeded" in row and "posted: " in row, out
    # the approval came before the job succeeded, and the research job did wait
    assert out.index(found.group(0)) < out.index("research succeeded"), out
    assert re.search(r"^research waiting \(runs [1-9], attempts used 0/3\)$", out, re.M), out
    # Issue 15: the web view's URL beside the key, and the job's page whose Approve answers it.
    assert re.search(
        r"^✓ Web view    http://127\.0\.0\.1:\d+/ui   \(paste the API key", out, re.M
    ), out
    page = rf"^  or click Approve on http://127\.0\.0\.1:\d+/ui#/jobs/{found['job']}$"
    assert re.search(page, out, re.M), out


def test_make_run_uses_the_same_default_ports_every_run(workdir: Path) -> None:
    """Issue 13 item 6: the SQS port changed on every run. The defaults are fixed: the API
    on 8000, moto's SQS server on 9324."""
    busy = [p for p in DEFAULT_PORTS.values() if port_in_use(p)]
    if busy and os.environ.get("CI") != "true":
        pytest.skip(f"port(s) {busy} in use on this machine (CI=true makes this a failure)")
    done = subprocess.run(
        [TASKLEASE, "dev", "--data-dir", ".tasklease", "--no-demo", "--exit-when-done"],
        cwd=workdir,
        env=clean_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stdout
    assert "API         http://127.0.0.1:8000 " in done.stdout
    assert "SQS         http://127.0.0.1:9324 (moto)" in done.stdout


@pytest.mark.parametrize("command", [["migrate"], ["queues", "create"], ["sweep", "--once"]])
def test_commands_that_deploy_or_serve_never_join_a_running_make_run(
    tmp_path: Path, command: list[str]
) -> None:
    """Issue 13 item 6 (review): `eval "$(uv run tasklease queues create)"` for LocalStack
    from a second shell took the running `make run`'s settings and endpoint instead of the
    shell's. Only operator commands use .tasklease/dev.json; these ask for their own."""
    (tmp_path / ".tasklease").mkdir()
    (tmp_path / ".tasklease" / "dev.json").write_text(
        json.dumps(
            {
                "pid": os.getpid(),  # alive: this test
                "env": {
                    "TASKLEASE_DATABASE_URL": "postgresql://x@127.0.0.1:1/gone",
                    "AWS_ENDPOINT_URL_SQS": "http://127.0.0.1:1",
                },
            }
        )
    )
    done = subprocess.run(
        [TASKLEASE, *command],
        cwd=tmp_path,
        env={**clean_env(), "AWS_ENDPOINT_URL_SQS": "http://127.0.0.1:2"},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert "using the running `make run`" not in done.stderr
    assert "127.0.0.1:1" not in done.stdout + done.stderr
    assert done.returncode != 0


def test_make_run_on_redis_settles_every_demo_job_on_an_embedded_redis(workdir: Path) -> None:
    """Issue 17: `make run TRANSPORT=redis` (tasklease dev --transport redis) runs the
    same demo on Redis Streams: an embedded redis-server whose append-only file is kept
    in the data directory beside the database, and every demo job settles as on SQS."""
    args = ["--data-dir", ".tasklease", "--exit-when-done", "--api-port", str(embedded.free_port())]
    done = subprocess.run(
        [TASKLEASE, "dev", "--transport", "redis", *args],
        cwd=workdir,
        env=clean_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=400,
        check=False,
    )
    assert done.returncode == 0, done.stdout
    redis_line = next(line for line in done.stdout.splitlines() if line.startswith("✓ Redis"))
    assert "redis://127.0.0.1:" in redis_line and "embedded, AOF in" in redis_line, redis_line
    assert "all demo jobs settled." in done.stdout, done.stdout
    assert "dead_lettered" in done.stdout and "succeeded" in done.stdout
    assert list((workdir / ".tasklease" / "redis").glob("appendonly*")), "no AOF kept"
    assert "moto" not in done.stdout.split("all demo jobs settled.")[0]
