"""Keys and limits as an operator handles them: `tasklease keys` and `tasklease limits` run
as processes against the test's database, and an API process whose log must never hold a
key, a secret or a payload."""

from __future__ import annotations

import re
import subprocess
import sys
import uuid
import warnings
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from app.services import auth
from app.tools.stack import embedded
from tests import carrier
from tests.conftest import ROOT, Stack, bearer

with warnings.catch_warnings():
    # starlette >= 1.10 warns at import that it found httpx rather than httpx2 (see test_api.py).
    warnings.filterwarnings("ignore", message="Using `httpx` with `starlette.testclient`")
    from fastapi.testclient import TestClient

# What this module checks does not depend on the carrier: it runs on moto only.
pytestmark = [pytest.mark.e2e, pytest.mark.carrier_neutral]

KEY = re.compile(r"tlk_[0-9a-f]{12}_[A-Za-z0-9_-]{43}")
NOOP = {"kind": "demo.noop", "payload": {}}


def start(stack: Stack, *args: str) -> subprocess.Popen[str]:
    # A wide terminal, so that rich does not fold table cells across lines.
    return subprocess.Popen(
        [sys.executable, "-m", "app.cli", *args],
        env={**stack.env, "COLUMNS": "200"},
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def finish(proc: subprocess.Popen[str]) -> tuple[int, str, str]:
    out, err = proc.communicate(timeout=60)
    return proc.returncode, out, err


def cli(stack: Stack, *args: str) -> tuple[int, str, str]:
    """(exit code, stdout, stderr) of one `tasklease` command."""
    return finish(start(stack, *args))


@pytest.fixture
def api_key() -> None:
    """The ``api`` client sends no key of its own: these tests count the keys."""


# --- keys ------------------------------------------------------------------------------


def test_keys_create_list_revoke_show_the_key_once_and_store_only_a_hash(
    stack: Stack, sql: Any, api: TestClient
) -> None:
    # keys create: the key alone on stdout (so `$(tasklease keys create ...)` captures it),
    # the table for the operator on stderr.
    code, out, err = cli(stack, "keys", "create", "--tenant", "t1", "--name", "n")
    assert code == 0, err
    key = out.strip()
    assert KEY.fullmatch(key), out
    key_id, secret = auth.split_key(key)
    assert key_id in err
    assert "shown once" in err
    assert secret not in err

    # Only a keyed hash is stored: the secret is in no column, in no encoding.
    row = sql.execute("SELECT * FROM api_keys WHERE id = %s", (key_id,)).fetchone()
    assert (row["tenant"], row["name"], row["admin"], row["revoked_at"]) == ("t1", "n", False, None)
    for column, value in row.items():
        stored = bytes(value) if isinstance(value, bytes | memoryview) else str(value).encode()
        assert secret.encode() not in stored, column
        assert key.encode() not in stored, column
    assert len(bytes(row["secret_hash"])) == 32
    assert (row["scheme"], row["salt"], len(row["hash_secret_id"])) == ("hmac-sha256", None, 16)

    # The key works; the API process has verified it once and remembers it.
    me = api.get("/v1/me", headers=bearer(key))
    assert me.status_code == 200
    assert me.json() == {"tenant": "t1", "admin": False, "key_id": key_id, "via": "api_key"}

    # keys list shows the id, never the key; the refusals run alongside.
    listing = start(stack, "keys", "list")
    bad_tenant = start(stack, "keys", "create", "--tenant", "not a tenant")
    unknown = start(stack, "keys", "revoke", "0" * 12)
    code, out, err = finish(listing)
    assert code == 0, err
    assert key_id in out
    assert "t1" in out
    assert "1 API keys" in out
    assert secret not in out + err
    code, out, err = finish(bad_tenant)
    assert code != 0
    assert "not valid" in err
    assert out == ""  # no key printed
    code, _, err = finish(unknown)
    assert code != 0
    assert f"no key {'0' * 12}" in err
    assert sql.execute("SELECT count(*) AS n FROM api_keys").fetchone()["n"] == 1

    # keys revoke: the running API refuses the key on its next request.
    code, out, err = cli(stack, "keys", "revoke", key_id)
    assert code == 0, err
    assert key_id in out
    assert "revoked" in out
    assert secret not in out + err
    assert sql.execute("SELECT revoked_at FROM api_keys WHERE id = %s", (key_id,)).fetchone()[
        "revoked_at"
    ]
    refused = api.get("/v1/me", headers=bearer(key))
    assert refused.status_code == 401
    assert 'error="invalid_token"' in refused.headers["WWW-Authenticate"]
    assert api.post("/v1/jobs", json=NOOP, headers=bearer(key)).status_code == 401
    assert sql.execute("SELECT count(*) AS n FROM jobs").fetchone()["n"] == 0


# --- limits ----------------------------------------------------------------------------


def test_limits_set_list_clear_change_what_the_running_api_admits(
    stack: Stack, sql: Any, api: TestClient
) -> None:
    key = bearer(stack.key("acme"))

    # limits set: acme may submit one job now and almost nothing after.
    code, out, err = cli(stack, "limits", "set", "acme", "--rate", "0.001", "--burst", "1")
    assert code == 0, err
    assert "acme" in out
    assert [api.post("/v1/jobs", json=NOOP, headers=key).status_code for _ in range(2)] == [
        202,
        429,
    ]

    # A second set changes only the limit it names; a bad tenant name changes nothing.
    flight = start(stack, "limits", "set", "acme", "--max-in-flight", "5", "--max-running", "4")
    bad = start(stack, "limits", "set", "no tenant", "--burst", "5")
    assert finish(flight)[0] == 0
    code, _, err = finish(bad)
    assert code == 2
    assert "not valid" in err
    rows = sql.execute("SELECT * FROM tenant_limits ORDER BY tenant").fetchall()
    assert [
        (r["tenant"], r["rate_per_second"], r["burst"], r["max_in_flight"], r["max_running"])
        for r in rows
    ] == [("acme", 0.001, 1, 5, 4)]

    # limits list: the overrides, the defaults for the rest, the jobs in flight and running.
    code, out, err = cli(stack, "limits", "list")
    assert code == 0, err
    (acme_line,) = [line for line in out.splitlines() if " acme " in f" {line} "]
    cells = [c.strip() for c in re.split(r"[│|]", acme_line) if c.strip()]
    assert cells == ["acme", "0.001", "1", "5", "1", "4", "0", "0", "off"]

    # limits clear: back to the deployment's defaults (a burst of 100 at 50 per second).
    code, out, err = cli(stack, "limits", "clear", "acme")
    assert code == 0, err
    assert "acme: back to the defaults" in out
    assert sql.execute("SELECT count(*) AS n FROM tenant_limits").fetchone()["n"] == 0
    assert [api.post("/v1/jobs", json=NOOP, headers=key).status_code for _ in range(3)] == [
        202,
        202,
        202,
    ]


# --- the API process's log ---------------------------------------------------------------


def test_the_api_log_holds_no_key_no_secret_and_no_payload(stack: Stack, sql: Any) -> None:
    marker = f"marker-{uuid.uuid4().hex}"
    key = stack.key("acme")
    revoked_key = stack.key("acme", name="revoked")
    _, secret = auth.split_key(key)
    wrong = f"tlk_{auth.split_key(key)[0]}_{marker}-wrong-secret-00"
    # The queue the API sends to is not there: the fast-path send fails and is logged,
    # so a request's own log line is there to be read.
    port = embedded.free_port()
    proc = stack.spawn(
        "api",
        "--port",
        str(port),
        name="api",
        env={"TASKLEASE_LOG_LEVEL": "DEBUG", **carrier.broken_env(stack)},
    )
    embedded.wait_for_http(f"http://127.0.0.1:{port}/healthz", timeout=30, proc=proc)
    sql.execute(
        "UPDATE api_keys SET revoked_at = now() WHERE id = %s", (auth.split_key(revoked_key)[0],)
    )

    def oversized() -> Iterator[bytes]:
        yield b'{"kind": "demo.noop", "payload": {"note": "' + marker.encode()
        for _ in range(300):
            yield b"x" * 1024

    job_body = {"kind": "demo.noop", "payload": {"note": marker}}
    with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=30) as client:
        accepted = client.post(
            "/v1/jobs", json=job_body, headers={**bearer(key), "Idempotency-Key": marker}
        )
        answers = [
            client.get(f"/v1/jobs/{accepted.json()['id']}", headers=bearer(key)),
            client.post("/v1/jobs", json=job_body, headers=bearer(wrong)),
            client.post("/v1/jobs", json=job_body, headers=bearer(f"tlk_{marker}")),
            client.post("/v1/jobs", json=job_body, headers=bearer(revoked_key)),
            client.post("/v1/jobs", json=job_body, headers={"Authorization": f"Basic {marker}"}),
            client.post(
                "/v1/jobs",
                json={"kind": "support.triage", "payload": {"subject": marker}},
                headers=bearer(key),
            ),
            client.post(
                "/v1/jobs",
                content=b'{"kind": "' + marker.encode(),
                headers={**bearer(key), "content-type": "application/json"},
            ),
            client.post(
                "/v1/jobs",
                content=oversized(),
                headers={**bearer(key), "content-type": "application/json"},
            ),
        ]
    assert accepted.status_code == 202, accepted.text
    assert [a.status_code for a in answers] == [200, 401, 401, 401, 401, 422, 400, 413]
    stack.stop_all()  # SIGTERM: uvicorn flushes and logs its shutdown

    log = proc.log_path.read_text()  # type: ignore[attr-defined]
    assert "send failed" in log  # the request path did log
    assert "Application shutdown complete" in log  # the whole log, to the end
    for needle in (key, secret, revoked_key, auth.split_key(revoked_key)[1], wrong, marker):
        assert needle not in log, needle
