"""Streams against real PostgreSQL and SQS: a job's transitions and progress in commit
order, as Server-Sent Events and as a long poll, resumable without gaps or repeats;
output fenced by the lease token; a row of a transaction still running holds back the
rows after it (never skipped); the tenant stream and the overview see one tenant only."""

from __future__ import annotations

import json
import threading
import uuid
from typing import Any

import psycopg
import pytest

from app import store
from app.store.streams import OutputItem, Position
from tests.conftest import Stack, bearer, run, wait_for
from tests.integration.test_api_waits import drain, submit
from tests.integration.test_output_buffer import running

# What this module checks does not depend on the carrier: it runs on moto only.
pytestmark = [pytest.mark.integration, pytest.mark.carrier_neutral]


def sse_frames(api: Any, url: str, **headers: str) -> list[dict[str, Any]]:
    """Every frame of a stream that ends (a finished job's), parsed."""
    frames: list[dict[str, Any]] = []
    current: dict[str, Any] = {}
    with api.stream("GET", url, headers=headers) as resp:
        assert resp.status_code == 200, resp.read()
        assert resp.headers["content-type"].startswith("text/event-stream")
        for line in resp.iter_lines():
            if line == "":
                if current:
                    frames.append(current)
                current = {}
            elif line.startswith(":"):
                continue
            else:
                field, _, value = line.partition(":")
                current[field] = value.lstrip(" ")
    if current:
        frames.append(current)
    return frames


def finished_job(stack: Stack, api: Any, sql: Any, steps: int = 3) -> str:
    job = submit(api, {"kind": "demo.sleep", "payload": {"steps": steps}})
    run(drain(stack, sql, [job["id"]]))
    return str(job["id"])


def test_job_stream_has_transitions_and_progress_in_order_and_ends(
    stack: Stack, api: Any, sql: Any
) -> None:
    job_id = finished_job(stack, api, sql)
    frames = sse_frames(api, f"/v1/jobs/{job_id}/stream")
    assert frames[-1]["event"] == "end"
    assert json.loads(frames[-1]["data"]) == {"state": "succeeded"}
    body = [json.loads(f["data"]) for f in frames[:-1]]
    kinds = [(b["type"], b["data"].get("to_state") or b["data"].get("note")) for b in body]
    assert kinds == [
        ("transition", "queued"),
        ("transition", "leased"),
        ("transition", "running"),
        ("progress", "step 1 of 3"),
        ("progress", "step 2 of 3"),
        ("progress", "step 3 of 3"),
        ("transition", "succeeded"),
    ]
    ids = [f["id"] for f in frames[:-1]]
    assert ids == [b["id"] for b in body]
    positions = [Position(*map(int, i.split("-"))) for i in ids]
    assert positions == sorted(positions) and len(set(positions)) == len(positions)
    assert body[5]["data"]["fraction"] == 1.0

    # Resumed after the third event: exactly the rest, no repeat, no gap.
    rest = sse_frames(api, f"/v1/jobs/{job_id}/stream", **{"Last-Event-ID": ids[2]})
    assert [f.get("id") for f in rest[:-1]] == ids[3:]
    assert rest[-1]["event"] == "end"


def caught_up(api: Any, sql: Any, job_id: str) -> str:
    """Where a job's stream stands after every event written so far. A transaction still
    running anywhere on the server (another test's, in the other pytest-xdist process or
    another session on a shared server) holds the latest rows back for a moment: read
    until the page shows them all."""
    written = sql.execute(
        "SELECT (SELECT count(*) FROM job_events WHERE job_id = %(j)s)"
        " + (SELECT count(*) FROM job_output WHERE job_id = %(j)s) AS n",
        {"j": job_id},
    ).fetchone()["n"]

    def head() -> str | None:
        page = api.get(f"/v1/jobs/{job_id}/stream", params={"after": "0", "wait": 0}).json()
        return str(page["next"]) if len(page["events"]) == written else None

    return wait_for(head, timeout=30, what=f"the stream to show the {written} events written")  # type: ignore[no-any-return]


def test_long_poll_pages_through_the_same_events(stack: Stack, api: Any, sql: Any) -> None:
    job_id = finished_job(stack, api, sql, steps=2)
    seen: list[str] = []
    after = "0"
    for _ in range(10):
        # wait 1, not 0: rows another transaction on the server holds back come within it
        resp = api.get(f"/v1/jobs/{job_id}/stream", params={"after": after, "wait": 1})
        assert resp.status_code == 200, resp.text
        page = resp.json()
        seen += [e["id"] for e in page["events"]]
        after = page["next"]
        if page["done"]:
            break
    else:
        pytest.fail("the long poll never said done")
    sse = [f["id"] for f in sse_frames(api, f"/v1/jobs/{job_id}/stream")[:-1]]
    assert seen == sse and len(seen) == 6


def test_long_poll_is_woken_by_a_write(stack: Stack, api: Any, sql: Any) -> None:
    """A poll waiting for a running job's next event answers when it is written."""
    job = submit(api, {"kind": "demo.noop", "payload": {}})
    token = running(sql, job["id"])
    head = caught_up(api, sql, job["id"])
    result: dict[str, Any] = {}

    def poll() -> None:
        resp = api.get(f"/v1/jobs/{job['id']}/stream", params={"after": head, "wait": 20})
        result["page"] = resp.json()

    waiter = threading.Thread(target=poll)
    waiter.start()
    written = run(emit(stack, uuid.UUID(job["id"]), token, [{"n": 1}]))
    assert written
    waiter.join(25)
    assert not waiter.is_alive()
    page = result["page"]
    assert [(e["type"], e["data"]) for e in page["events"]] == [("output", {"n": 1})]
    assert page["done"] is False


async def emit(stack: Stack, job_id: uuid.UUID, token: uuid.UUID, datas: list[Any]) -> bool:
    import datetime as dt

    assert stack.settings.database_url
    async with store.connect(stack.settings.database_url, max_size=1) as db:
        items = [OutputItem(dt.datetime.now(dt.UTC), "output", d) for d in datas]
        return await store.streams.append(db, job_id, token, items)


def test_output_is_fenced_by_the_lease_token(stack: Stack, api: Any, sql: Any) -> None:
    job = submit(api, {"kind": "demo.noop", "payload": {}})
    token = running(sql, job["id"])
    assert not run(emit(stack, uuid.UUID(job["id"]), uuid.uuid4(), [{"zombie": True}]))
    assert sql.execute("SELECT count(*) AS n FROM job_output").fetchone()["n"] == 0
    assert run(emit(stack, uuid.UUID(job["id"]), token, [{"holder": True}, {"n": 2}]))
    rows = sql.execute("SELECT data, attempt FROM job_output ORDER BY id").fetchall()
    assert rows == [{"data": {"holder": True}, "attempt": 1}, {"data": {"n": 2}, "attempt": 1}]


def test_a_running_transaction_holds_back_later_rows_never_skipped(
    stack: Stack, api: Any, sql: Any, database_url: str
) -> None:
    """Ids are handed out at insert, not at commit: a reader that took a later row before
    an earlier one committed would resume past the earlier one. The reader never takes a
    row of a transaction that began after one still running."""
    job = submit(api, {"kind": "demo.noop", "payload": {}})
    token = running(sql, job["id"])
    with psycopg.connect(database_url) as slow:  # a transaction, left open
        slow.execute(
            "INSERT INTO job_output (job_id, attempt, type, data) VALUES (%s, 1, 'output', '\"first\"')",
            (job["id"],),
        )
        assert run(emit(stack, uuid.UUID(job["id"]), token, ["second"]))  # commits at once
        page = api.get(f"/v1/jobs/{job['id']}/stream", params={"after": "0", "wait": 0}).json()
        outputs = [e["data"] for e in page["events"] if e["type"] == "output"]
        assert outputs == []  # "second" waits for "first"'s transaction to end
        slow.commit()
    # Any transaction of the server still running holds rows back for as long: poll.
    seen: list[Any] = []
    after = "0"
    for _ in range(20):
        page = api.get(f"/v1/jobs/{job['id']}/stream", params={"after": after, "wait": 2}).json()
        seen += [e["data"] for e in page["events"] if e["type"] == "output"]
        after = page["next"]
        if len(seen) >= 2:
            break
    assert seen == ["first", "second"]


def test_tenant_stream_and_overview_see_one_tenant(stack: Stack, api: Any, sql: Any) -> None:
    start = api.get("/v1/stream", params={"after": "0", "wait": 0}).json()["next"]
    other = bearer(stack.key("globex"))
    mine = submit(api, {"kind": "demo.noop", "payload": {}})
    theirs = submit(api, {"kind": "demo.noop", "payload": {}}, **other)
    page = api.get("/v1/stream", params={"after": start, "wait": 5}).json()
    assert {e["job_id"] for e in page["events"]} == {mine["id"]}
    assert {e["tenant"] for e in page["events"]} == {"acme"}
    theirs_page = api.get("/v1/stream", params={"after": start, "wait": 5}, headers=other).json()
    assert {e["job_id"] for e in theirs_page["events"]} == {theirs["id"]}
    # Another tenant's job: 404, as everywhere.
    assert api.get(f"/v1/jobs/{theirs['id']}/stream", params={"after": "0"}).status_code == 404
    assert api.get("/v1/stream", params={"tenant": "globex"}).status_code == 403
    overview = api.get("/v1/overview").json()
    assert overview["counts"]["queued"] == 1 and overview["counts"]["succeeded"] == 0
    assert overview["oldest_queued_seconds"] >= 0
    assert overview["dead_letter_queue"] is None
    admin = bearer(stack.key("ops", admin=True))
    every = api.get("/v1/overview", headers=admin).json()
    assert every["counts"]["queued"] == 2
    assert set(every["dead_letter_queue"]) >= {"visible"} or every["dead_letter_queue"]


@pytest.mark.parametrize(
    ("params", "headers", "named"),
    [
        ({"after": "12"}, {}, "after"),
        ({"after": "x-1"}, {}, "after"),
        ({}, {"Last-Event-ID": "1-2-3"}, "Last-Event-ID"),
        ({"after": "1-99999999999999999999"}, {}, "after"),
        ({"after": f"{2**64}-1"}, {}, "after"),
        ({}, {"Last-Event-ID": "1-9223372036854775808"}, "Last-Event-ID"),
    ],
)
def test_a_bad_position_is_422_naming_it(
    api: Any, params: dict[str, str], headers: dict[str, str], named: str
) -> None:
    job = submit(api, {"kind": "demo.noop", "payload": {}})
    resp = api.get(f"/v1/jobs/{job['id']}/stream", params=params, headers=headers)
    assert resp.status_code == 422, resp.text
    assert named in resp.text


def test_tenant_sse_stream_from_a_real_server(stack: Stack, api: Any) -> None:
    """The tenant stream over a real connection to an API process: its first frame says
    where it begins, then a job submitted after it arrives, as it happens."""
    import httpx

    url = stack.api()
    key = stack.key()
    lines: list[str] = []
    with (
        httpx.Client(base_url=url, headers=bearer(key), timeout=20) as client,
        client.stream("GET", "/v1/stream") as resp,
    ):
        assert resp.status_code == 200
        it = resp.iter_lines()
        first = next(it)
        assert first.startswith("id: ") and first.endswith("-0"), first
        job = client.post("/v1/jobs", json={"kind": "demo.noop", "payload": {}}).json()
        for line in it:
            lines.append(line)
            if line.startswith("data:") and job["id"] in line:
                break
    data = json.loads(next(x for x in lines if job["id"] in x)[5:])
    assert data["type"] == "transition" and data["data"]["to_state"] == "queued"


def test_a_reader_gets_the_event_when_the_listener_lost_its_connection(
    stack: Stack, api: Any, sql: Any
) -> None:
    """The notification only says "read again": with the process's LISTEN connection
    killed, an event written meanwhile still reaches the waiting reader."""
    import time

    job = submit(api, {"kind": "demo.noop", "payload": {}})
    token = running(sql, job["id"])
    head = caught_up(api, sql, job["id"])
    killed = 0
    for _ in range(50):
        killed = sql.execute(
            "SELECT count(pg_terminate_backend(pid)) AS n FROM pg_stat_activity "
            "WHERE datname = current_database() AND query ILIKE 'LISTEN%%'"
        ).fetchone()["n"]
        if killed:
            break
        time.sleep(0.1)
    assert killed == 1
    assert run(emit(stack, uuid.UUID(job["id"]), token, ["after the kill"]))
    page = api.get(f"/v1/jobs/{job['id']}/stream", params={"after": head, "wait": 15}).json()
    assert [e["data"] for e in page["events"]] == ["after the kill"]


def test_a_quiet_tenants_stream_moves_past_other_tenants_rows(stack: Stack, api: Any) -> None:
    """A long poll that finds nothing of its tenant still moves ``next`` on, past the rows
    of others it read: the next poll does not read them again."""
    start = api.get("/v1/stream", params={"after": "0", "wait": 0}).json()["next"]
    other = bearer(stack.key("globex"))
    for _ in range(3):
        submit(api, {"kind": "demo.noop", "payload": {}}, **other)

    def moved_on() -> Any:
        # A poll that a transaction elsewhere on the server holds back moves nothing yet:
        # ask again (from the same start) until the others' rows are readable.
        page = api.get("/v1/stream", params={"after": start, "wait": 1}).json()
        assert page["events"] == []
        moved = Position(*map(int, page["next"].split("-"))) > Position(*map(int, start.split("-")))
        return page if moved else None

    page = wait_for(
        moved_on, timeout=30, what="a quiet tenant's poll to move past the others' rows"
    )
    mine = submit(api, {"kind": "demo.noop", "payload": {}})
    later = api.get("/v1/stream", params={"after": page["next"], "wait": 5}).json()
    assert [e["job_id"] for e in later["events"]] == [mine["id"]]
