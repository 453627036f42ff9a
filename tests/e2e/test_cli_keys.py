"""Flow control by key in the CLI (issue 35): `jobs show` shows a job's key as written,
its limits per key and, for a job behind its key, that it waits for its key (also in
--json); `jobs list --key` and `jobs search --key` list the key's jobs; `kinds` shows each
kind's flow control. Real subprocesses against the test's PostgreSQL, queue and API."""

from __future__ import annotations

import json
import uuid

import pytest

from tests.conftest import Stack
from tests.e2e.test_cli_output import flat, ok

pytestmark = [pytest.mark.e2e, pytest.mark.carrier_neutral]

KEY = "[b]c-1[/]"  # markup a tenant may send: shown as written


def row(name: str, value: str) -> str:
    """A row of a two-column table as ``flat`` reads it."""
    return f"│ {name} │ {value} │"


def converse(stack: Stack, conversation: str) -> uuid.UUID:
    payload = {"conversation": conversation, "text": "hi"}
    return uuid.UUID(ok(stack, "submit", "demo.converse", "--payload", json.dumps(payload)).strip())


def test_jobs_show_list_and_kinds_show_keys_and_their_limits(stack: Stack) -> None:
    # No worker: the key's first job is queued, the second waits behind it.
    first, second = converse(stack, KEY), converse(stack, KEY)
    other = converse(stack, "c-2")

    shown = flat(ok(stack, "jobs", "show", str(second)))
    assert row("key", KEY) in shown
    assert row("limits per key", "1 at a time") in shown
    assert (
        row("the key's jobs", "0 others holding it, 1 queued before this one, 2 unfinished")
        in shown
    )
    assert "│ waits │ for its key:" in shown
    head = flat(ok(stack, "jobs", "show", str(first)))
    assert row("key", KEY) in head and "0 queued before this one" in head
    assert "for its key" not in head, "nothing ahead of the first"
    doc = json.loads(ok(stack, "jobs", "show", "--json", str(second)))
    assert doc["job"]["key"] == KEY
    assert doc["key"] == {
        "key": KEY,
        "concurrency": 1,
        "rate": None,
        "holding": 0,
        "queued_ahead": 1,
        "open": 2,
        "waits_for_key": True,
        "waits_for_rate": False,
    }
    assert doc["job"]["key_status"] == doc["key"], "the job as GET /v1/jobs/{id} answers it"

    items = json.loads(ok(stack, "jobs", "list", "--key", KEY, "--json"))["items"]
    assert {i["id"] for i in items} == {str(first), str(second)}
    assert {i["key"] for i in items} == {KEY}
    found = json.loads(ok(stack, "jobs", "search", "--key", "c-2", "--json"))["items"]
    assert [i["id"] for i in found] == [str(other)]

    url, key = stack.api(), stack.key()
    kinds = flat(ok(stack, "kinds", "--api-url", url, "--api-key", key, columns=250))
    assert "key from payload; 1 at a time" in kinds
    assert "key from payload; debounce 2 s" in kinds
    assert "key from payload; 2 starts per 1 s" in kinds
