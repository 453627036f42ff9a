"""Children count against their tenant and their key (issue 35): a spawned child carries
its key and its kind's limits per key, so a conversation's children run one at a time;
past its tenant's window on the queue it is written parked, as a submitted job is; its
kind's submit-time policies (debounce, if_active) do not apply, since its parent waits on
it."""

from __future__ import annotations

import datetime as dt
import itertools
from collections.abc import Iterator
from typing import Any

import pytest

from app import store
from app.states import JobState
from tests import flow_kinds
from tests.conftest import Stack, job_row
from tests.helpers import drain, engine_for, handle_and_ack, receive_records, submit
from tests.invariants import describe

pytestmark = pytest.mark.integration


@pytest.fixture(autouse=True)
def parent_kind() -> Iterator[None]:
    with flow_kinds.registered():
        yield


def children_of(sql: Any, parent: Any) -> list[dict[str, Any]]:
    return sql.execute(  # type: ignore[no-any-return]
        "SELECT * FROM jobs WHERE parent_id = %s ORDER BY spawn_key", (parent,)
    ).fetchall()


def parent_of(children: list[tuple[str, dict[str, Any]]]) -> dict[str, Any]:
    return {"children": [{"kind": k, "payload": p} for k, p in children]}


@pytest.mark.asyncio
async def test_a_conversations_children_carry_its_key_and_run_one_at_a_time(
    stack: Stack, sql: Any
) -> None:
    async with engine_for(stack.settings) as engine:
        parent = await submit(
            engine,
            "test.flow_parent",
            parent_of(
                [("demo.converse", {"conversation": "c", "text": f"m{i}"}) for i in range(3)]
            ),
        )
        await drain(engine, sql, [parent], deadline=60)
    assert job_row(sql, parent)["state"] == JobState.SUCCEEDED, describe(sql, parent)
    kids = children_of(sql, parent)
    assert [(k["flow_key"], k["key_concurrency"]) for k in kids] == [("c", 1)] * 3
    assert [k["state"] for k in kids] == [JobState.SUCCEEDED] * 3
    spans = sorted(
        (
            dt.datetime.fromisoformat(k["result"]["started_at"]),
            dt.datetime.fromisoformat(k["result"]["ended_at"]),
        )
        for k in kids
    )
    for (_, ended), (started, _) in itertools.pairwise(spans):
        assert ended <= started, "the conversation's children never ran at the same time"
    assert all(k["attempt"] == 1 for k in kids), "waiting for the key uses no attempt"


@pytest.mark.asyncio
async def test_children_past_the_tenants_window_are_written_parked(stack: Stack, sql: Any) -> None:
    """acme's cap 1, window 2: the running parent holds one place, its first child the
    other; the next two children are written parked, with no message, and go out as
    leases end."""
    async with engine_for(stack.settings) as engine:
        await store.tenants.set_limits(engine.db, "acme", max_running=1)
        parent = await submit(
            engine, "test.flow_parent", parent_of([("demo.noop", {})] * 3), tenant="acme"
        )
        records = await receive_records(engine)
        await handle_and_ack(engine, records)  # spawns the three, then waits for them
        kids = children_of(sql, parent)
        assert job_row(sql, parent)["state"] == JobState.WAITING, describe(sql, parent)
        assert [k["parked"] for k in kids] == [False, True, True]
        boxes = sql.execute(
            "SELECT job_id FROM outbox WHERE job_id = ANY(%s::uuid[])",
            ([str(k["id"]) for k in kids],),
        ).fetchall()
        assert [str(b["job_id"]) for b in boxes] == [str(kids[0]["id"])], (
            "a parked child has no outbox row"
        )
        events = [
            sql.execute(
                "SELECT detail FROM job_events WHERE job_id = %s ORDER BY id LIMIT 1", (k["id"],)
            ).fetchone()["detail"]
            for k in kids
        ]
        assert "parked" not in events[0] and all("parked" in e for e in events[1:]), events
        await drain(engine, sql, [parent, *(k["id"] for k in kids)], deadline=60)
    assert job_row(sql, parent)["state"] == JobState.SUCCEEDED, describe(sql, parent)
    kids = children_of(sql, parent)
    assert [(k["state"], k["attempt"], k["parked"]) for k in kids] == [
        (JobState.SUCCEEDED, 1, False)
    ] * 3


@pytest.mark.asyncio
async def test_a_childs_kind_debounce_does_not_replace_a_child(stack: Stack, sql: Any) -> None:
    """demo.reindex debounces its jobs per document; two children of one document both
    run (the parent waits on each), with the document as their key."""
    async with engine_for(stack.settings) as engine:
        parent = await submit(
            engine,
            "test.flow_parent",
            parent_of([("demo.reindex", {"document": "doc", "revision": i}) for i in range(2)]),
        )
        await drain(engine, sql, [parent], deadline=60)
    assert job_row(sql, parent)["result"]["succeeded"] == 2, describe(sql, parent)
    kids = children_of(sql, parent)
    assert [(k["state"], k["flow_key"]) for k in kids] == [(JobState.SUCCEEDED, "doc")] * 2
    assert [k["result"]["indexed_revision"] for k in kids] == [0, 1]


@pytest.mark.asyncio
async def test_a_child_on_the_key_its_parent_holds_runs_within_the_parents_hold(
    stack: Stack, sql: Any
) -> None:
    """test.flow_nested (one per conversation) spawns a child of its own kind and
    conversation and waits on it: the child does not wait for the key its waiting
    ancestors hold (it would wait forever); a later job of the key keeps its limit."""
    async with engine_for(stack.settings) as engine:
        top = await submit(engine, "test.flow_nested", {"conversation": "n", "depth": 2})
        await drain(engine, sql, [top], deadline=60)
        # A later job of the conversation, once the three finished, runs as usual.
        later = await submit(engine, "test.flow_nested", {"conversation": "n"})
        await drain(engine, sql, [later], deadline=30)
    rows = sql.execute(
        "SELECT * FROM jobs WHERE kind = 'test.flow_nested' ORDER BY created_at"
    ).fetchall()
    assert [r["state"] for r in rows] == [JobState.SUCCEEDED] * 4, describe(sql, top)
    assert [(r["flow_key"], r["key_concurrency"]) for r in rows] == [
        ("n", 1),
        ("n", None),  # under its parent's hold
        ("n", None),
        ("n", 1),
    ]


@pytest.mark.asyncio
async def test_a_parents_wait_releases_its_parked_child_at_once(stack: Stack, sql: Any) -> None:
    """A window of one slot (cap 1 x 1): the running parent fills it, so both children are
    written parked; the parent's wait frees the slot and releases the first at once (the
    parent's claim saw no parked job: only the wait's own look can), no sweep needed."""
    settings = stack.with_settings(queue_window_per_slot=1)
    async with engine_for(settings) as engine:
        await store.tenants.set_limits(engine.db, "acme", max_running=1)
        parent = await submit(
            engine, "test.flow_parent", parent_of([("demo.noop", {})] * 2), tenant="acme"
        )
        await handle_and_ack(engine, await receive_records(engine))
        assert job_row(sql, parent)["state"] == JobState.WAITING, describe(sql, parent)
        kids = children_of(sql, parent)
        assert [k["parked"] for k in kids] == [False, True], "the first released by the wait"
        sent = sql.execute(
            "SELECT sent_at FROM outbox WHERE job_id = %s", (kids[0]["id"],)
        ).fetchall()
        assert [s["sent_at"] is not None for s in sent] == [True]
        await drain(engine, sql, [parent], deadline=60)
    assert job_row(sql, parent)["state"] == JobState.SUCCEEDED, describe(sql, parent)
