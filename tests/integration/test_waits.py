"""The waits core on the real stack (PostgreSQL, and moto or LocalStack), the engine in
this process: timers past SQS's delay cap and lost wake-ups (the sweeper), early and
duplicate messages (nothing runs), callbacks (in time, late, twice, heartbeats, answered
while the job still runs), fan-out and cancellation, and the gather rule in SQL."""

from __future__ import annotations

import asyncio
import itertools
import json
import time
import uuid
from typing import Any

import pytest

from app import errors, store
from app.kinds.waits import Rule
from app.services import callbacks, jobs, sweeper
from app.states import JobState
from app.worker.engine import Engine
from tests.conftest import Stack, job_row
from tests.helpers import drain, engine_for, handle_and_ack, receive_records, routes, submit
from tests.invariants import check_invariants, describe, timeline

pytestmark = pytest.mark.integration


async def handle_next(engine: Engine, sql: Any, *job_ids: Any, deadline: float = 15) -> None:
    """Receive and handle batches until a message for each of ``job_ids`` was handled."""
    end = time.monotonic() + deadline
    left = {str(j) for j in job_ids}
    while left and time.monotonic() < end:
        records = await receive_records(engine, wait=1)
        if records:
            await handle_and_ack(engine, records)
            left -= {j for j in left if any(j in r["body"] for r in records)}
    if left:
        pytest.fail(
            f"no message for {sorted(left)} in {deadline:.0f} s\n"
            + "\n".join(describe(sql, j) for j in left)
        )


async def sweep_until_woken(settings: Any, engine: Engine, *, deadline: float = 15) -> Any:
    """Sweep again and again until one sweep sends a wake-up; that sweep's report."""
    end = time.monotonic() + deadline
    while time.monotonic() < end:
        report = await sweeper.sweep_once(settings, engine.db, engine.queue)
        if report.wakeups:
            return report
        await asyncio.sleep(0.2)
    pytest.fail(f"no sweep sent a wake-up in {deadline:.0f} s")


def db_passed(sql: Any, at: Any) -> bool:
    return bool(sql.execute("SELECT %s::timestamptz < now() AS passed", (at,)).fetchone()["passed"])


def wait_until_db_passes(sql: Any, at: Any, *, deadline: float = 15) -> None:
    end = time.monotonic() + deadline
    while not db_passed(sql, at):
        assert time.monotonic() < end, f"the database's clock never passed {at}"
        time.sleep(0.1)


# --- timers -----------------------------------------------------------------------


@pytest.mark.asyncio
async def test_a_sleep_longer_than_the_delay_cap_is_woken_by_the_sweeper(
    stack: Stack, sql: Any
) -> None:
    settings = stack.with_settings(max_message_delay_seconds=1)
    async with engine_for(settings) as engine:
        job_id = await submit(engine, "demo.nap", {"seconds": 3})
        await handle_next(engine, sql, job_id)
        row = job_row(sql, job_id)
        assert (row["state"], row["wait_kind"]) == (JobState.WAITING, "timer")
        # Three seconds is past the (shortened) cap: no wake-up was sent at suspension...
        assert row["wake_sent_at"] is None, describe(sql, job_id)
        # ...nor by a sweep while the timer is further away than the cap.
        assert (await sweeper.sweep_once(settings, engine.db, engine.queue)).wakeups == 0
        assert job_row(sql, job_id)["wake_sent_at"] is None

        report = await sweep_until_woken(settings, engine)
        assert report.wakeups == 1
        row = job_row(sql, job_id)
        left = sql.execute("SELECT %s::timestamptz - now() AS left", (row["wake_at"],)).fetchone()
        assert left["left"].total_seconds() <= 1, "sent before the timer was within the cap"
        await drain(engine, sql, [job_id])
    row = job_row(sql, job_id)
    assert row["state"] == JobState.SUCCEEDED, describe(sql, job_id)
    assert row["runs"] == 2, describe(sql, job_id)
    woke = [e for e in timeline(sql, job_id) if e["from_state"] == JobState.WAITING]
    assert [e["detail"] for e in woke] == ["woken: due"], describe(sql, job_id)
    due = sql.execute(
        "SELECT (result #>> '{}')::timestamptz AS due FROM effects "
        "WHERE job_id = %s AND key = 'sleep:nap-0'",
        (job_id,),
    ).fetchone()["due"]
    assert woke[0]["at"] >= due, describe(sql, job_id)
    check_invariants(sql, stack, [job_id])


@pytest.mark.asyncio
async def test_an_early_wake_up_is_re_delayed_without_running_any_code(
    stack: Stack, sql: Any
) -> None:
    async with engine_for(stack.settings) as engine:
        job_id = await submit(engine, "demo.nap", {"seconds": 3})
        await handle_next(engine, sql, job_id)
        before = job_row(sql, job_id)
        events = timeline(sql, job_id)
        assert before["state"] == JobState.WAITING and before["wake_sent_at"] is not None

        # A message for the job long before its timer is due.
        await engine.queue.send_jobs(routes(job_id))
        await handle_next(engine, sql, job_id)
        after = job_row(sql, job_id)
        assert after["state"] == JobState.WAITING, describe(sql, job_id)
        assert (after["runs"], after["attempt"]) == (before["runs"], before["attempt"]) == (1, 0)
        assert timeline(sql, job_id) == events  # no claim, no transition
        assert after["wake_sent_at"] > before["wake_sent_at"]  # re-sent with the delay left
        assert (
            sql.execute(
                "SELECT count(*) AS n FROM effects WHERE job_id = %s", (job_id,)
            ).fetchone()["n"]
            == 1
        )

        await drain(engine, sql, [job_id])
    row = job_row(sql, job_id)
    assert row["state"] == JobState.SUCCEEDED, describe(sql, job_id)
    assert row["runs"] == 2  # before the wait and after it: the early message ran nothing
    check_invariants(sql, stack, [job_id])


@pytest.mark.asyncio
async def test_a_lost_wake_up_is_sent_again_by_the_sweeper(stack: Stack, sql: Any) -> None:
    settings = stack.with_settings(wake_grace_seconds=1)
    async with engine_for(settings) as engine:
        job_id = await submit(engine, "demo.nap", {"seconds": 1})
        await handle_next(engine, sql, job_id)
        assert job_row(sql, job_id)["state"] == JobState.WAITING

        # The wake-up message is lost: received and deleted by someone else.
        end = time.monotonic() + 15
        lost: list[dict[str, Any]] = []
        while not lost:
            assert time.monotonic() < end, "the wake-up message never came"
            lost = await receive_records(engine, wait=1)
        assert [str(job_id) in r["body"] for r in lost] == [True]
        assert await engine.queue.delete_batch([r["receiptHandle"] for r in lost]) == []
        assert job_row(sql, job_id)["state"] == JobState.WAITING

        report = await sweep_until_woken(settings, engine)
        assert report.wakeups == 1
        await drain(engine, sql, [job_id])
    row = job_row(sql, job_id)
    assert row["state"] == JobState.SUCCEEDED, describe(sql, job_id)
    assert row["runs"] == 2
    check_invariants(sql, stack, [job_id])


@pytest.mark.asyncio
async def test_waits_use_no_attempts(stack: Stack, sql: Any) -> None:
    async with engine_for(stack.settings) as engine:
        job_id = await submit(engine, "demo.nap", {"seconds": 0.5, "naps": 2}, max_attempts=1)
        await drain(engine, sql, [job_id])
    row = job_row(sql, job_id)
    assert row["state"] == JobState.SUCCEEDED, describe(sql, job_id)
    assert (row["attempt"], row["max_attempts"], row["runs"]) == (1, 1, 3)
    waits = [e for e in timeline(sql, job_id) if e["to_state"] == JobState.WAITING]
    assert [e["attempt"] for e in waits] == [0, 0]  # each suspension gave its attempt back
    check_invariants(sql, stack, [job_id])


# --- callbacks --------------------------------------------------------------------


async def waiting_for_approval(engine: Engine, sql: Any, seconds: float) -> tuple[Any, str]:
    job_id = await submit(engine, "demo.approval", {"timeout_seconds": seconds})
    await handle_next(engine, sql, job_id)
    row = job_row(sql, job_id)
    assert (row["state"], row["wait_kind"], row["wait_key"]) == (
        JobState.WAITING,
        "callback",
        "approve",
    ), describe(sql, job_id)
    return job_id, await callbacks.token_for(engine.db, job_id, "approve")


def callback_row(sql: Any, job_id: Any) -> dict[str, Any]:
    return sql.execute("SELECT * FROM callbacks WHERE job_id = %s", (job_id,)).fetchone()  # type: ignore[no-any-return]


@pytest.mark.asyncio
async def test_a_callback_answered_before_its_timeout_wakes_the_job_with_the_answer(
    stack: Stack, sql: Any
) -> None:
    async with engine_for(stack.settings) as engine:
        job_id, token = await waiting_for_approval(engine, sql, 600)
        done = await callbacks.answer(engine.db, engine.queue, token, result={"by": "sam"})
        assert (done.job_id, done.callback_state, done.job_woken) == (
            str(job_id),
            "succeeded",
            True,
        )
        assert job_row(sql, job_id)["state"] == JobState.QUEUED
        await drain(engine, sql, [job_id])
    row = job_row(sql, job_id)
    assert row["result"] == {"approved": True, "answer": {"by": "sam"}}, describe(sql, job_id)
    assert row["runs"] == 2
    check_invariants(sql, stack, [job_id])


@pytest.mark.asyncio
async def test_a_callback_of_a_cancelled_job_takes_no_answer(stack: Stack, sql: Any) -> None:
    """Nobody would read it: the answer is 404 and the callback stays as it was."""
    async with engine_for(stack.settings) as engine:
        job_id, token = await waiting_for_approval(engine, sql, 600)
        await jobs.cancel(engine.db, job_id, scope=None)
        await refused_as_expired(engine, token)
    assert job_row(sql, job_id)["state"] == JobState.CANCELLED
    assert callback_row(sql, job_id)["state"] == "pending"
    check_invariants(sql, stack, [job_id])


async def refused_as_expired(engine: Engine, token: str) -> None:
    """An answer and a heartbeat are both NotFound (404): the token has expired."""
    with pytest.raises(errors.NotFound, match="past its deadline"):
        await callbacks.answer(engine.db, engine.queue, token, result="late")
    with pytest.raises(errors.NotFound, match="past its deadline"):
        await callbacks.heartbeat(engine.db, token)


@pytest.mark.asyncio
async def test_a_callback_answered_after_its_timeout_is_not_found_and_the_code_escalates(
    stack: Stack, sql: Any
) -> None:
    async with engine_for(stack.settings) as engine:
        job_id, token = await waiting_for_approval(engine, sql, 1)
        wait_until_db_passes(sql, callback_row(sql, job_id)["deadline"])
        # Past the deadline, before the job's code has seen it: expired, 404.
        await refused_as_expired(engine, token)
        await drain(engine, sql, [job_id])
        row = job_row(sql, job_id)
        assert row["result"] == {"approved": False, "escalated": True}, describe(sql, job_id)
        assert callback_row(sql, job_id)["state"] == "timed_out"
        # And once the code timed it out: still expired (404), not "answered" (409).
        await refused_as_expired(engine, token)
    assert callback_row(sql, job_id)["result"] is None
    check_invariants(sql, stack, [job_id])


@pytest.mark.asyncio
async def test_a_heartbeat_pushes_the_deadline_and_the_early_wake_up_runs_nothing(
    stack: Stack, sql: Any
) -> None:
    async with engine_for(stack.settings) as engine:
        job_id, token = await waiting_for_approval(engine, sql, 3)
        first = callback_row(sql, job_id)
        # A heartbeat a second and a half in: the deadline moves to 3 s from then.
        wait_until_db_passes(
            sql, first["created_at"] + (first["deadline"] - first["created_at"]) / 2
        )
        deadline = await callbacks.heartbeat(engine.db, token)
        assert deadline > first["deadline"]
        row = job_row(sql, job_id)
        assert (row["wake_at"], row["wake_sent_at"]) == (deadline, None)
        suspended_at = timeline(sql, job_id)[-1]["at"]
        await drain(engine, sql, [job_id])
    row = job_row(sql, job_id)
    assert row["result"] == {"approved": False, "escalated": True}, describe(sql, job_id)
    assert row["runs"] == 2, describe(sql, job_id)  # the message at the old deadline ran nothing
    claims = [e for e in timeline(sql, job_id) if e["to_state"] == JobState.LEASED]
    assert [c["at"] >= deadline for c in claims if c["at"] > suspended_at] == [True]
    cb = callback_row(sql, job_id)
    assert (cb["state"], cb["heartbeats"], cb["deadline"]) == ("timed_out", 1, deadline)
    check_invariants(sql, stack, [job_id])


@pytest.mark.asyncio
async def test_a_callback_answered_while_its_job_still_runs_is_not_lost(
    stack: Stack, sql: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The answer lands after the code read the callback as pending, before the job is
    waiting: the suspending transaction sees it and wakes the job at once."""
    answers: list[callbacks.Answered] = []
    suspend = store.waits.suspend

    async def answered_first(db: Any, job_id: uuid.UUID, *args: Any, **kw: Any) -> Any:
        token = await callbacks.token_for(db, job_id, "approve")
        answers.append(await callbacks.answer(db, engine.queue, token, result="quick"))
        return await suspend(db, job_id, *args, **kw)

    monkeypatch.setattr(store.waits, "suspend", answered_first)
    async with engine_for(stack.settings) as engine:
        job_id = await submit(engine, "demo.approval", {"timeout_seconds": 600})
        await handle_next(engine, sql, job_id)
        assert [a.job_woken for a in answers] == [False]  # the job was running: not woken there
        row = job_row(sql, job_id)
        assert row["state"] == JobState.QUEUED, describe(sql, job_id)
        monkeypatch.setattr(store.waits, "suspend", suspend)
        await drain(engine, sql, [job_id])
    row = job_row(sql, job_id)
    assert row["result"] == {"approved": True, "answer": "quick"}, describe(sql, job_id)
    details = [e["detail"] or "" for e in timeline(sql, job_id)]
    assert any(d.startswith("woken at once") for d in details), describe(sql, job_id)
    check_invariants(sql, stack, [job_id])


@pytest.mark.asyncio
async def test_a_second_answer_is_a_conflict_and_changes_nothing(stack: Stack, sql: Any) -> None:
    async with engine_for(stack.settings) as engine:
        job_id, token = await waiting_for_approval(engine, sql, 600)
        await callbacks.answer(engine.db, engine.queue, token, error="rejected")
        first = callback_row(sql, job_id)
        with pytest.raises(errors.Conflict, match="already answered"):
            await callbacks.answer(engine.db, engine.queue, token, result="approved after all")
        with pytest.raises(errors.Conflict, match="already answered"):
            await callbacks.answer(engine.db, engine.queue, token, error="twice")
        with pytest.raises(errors.Conflict):
            await callbacks.heartbeat(engine.db, token)
        assert callback_row(sql, job_id) == first
        await drain(engine, sql, [job_id])
    row = job_row(sql, job_id)
    assert row["state"] == JobState.DEAD_LETTERED, describe(sql, job_id)
    assert "rejected" in row["last_error"]
    check_invariants(sql, stack, [job_id])


@pytest.mark.asyncio
async def test_a_bad_answer_or_an_unknown_token_is_refused_and_changes_nothing(
    stack: Stack, sql: Any
) -> None:
    async with engine_for(stack.settings) as engine:
        job_id, token = await waiting_for_approval(engine, sql, 600)
        for bad in ("", "   "):
            with pytest.raises(errors.BadRequest, match="error must be a non-empty string"):
                await callbacks.answer(engine.db, engine.queue, token, error=bad)
        for unknown in ("", "tlcb_nope", token + "x", "tlcb_é", "x" * 500):
            with pytest.raises(errors.NotFound):
                await callbacks.answer(engine.db, engine.queue, unknown, result=1)
    assert callback_row(sql, job_id)["state"] == "pending"
    assert job_row(sql, job_id)["state"] == JobState.WAITING


# --- children ---------------------------------------------------------------------


def children_of(sql: Any, parent: Any) -> list[dict[str, Any]]:
    return sql.execute(  # type: ignore[no-any-return]
        "SELECT * FROM jobs WHERE parent_id = %s ORDER BY spawn_key", (parent,)
    ).fetchall()


@pytest.mark.asyncio
async def test_twenty_children_at_least_fifteen_with_three_failing_for_good_succeeds(
    stack: Stack, sql: Any
) -> None:
    payload = {"children": 20, "at_least": 15, "fail": [3, 7, 11]}
    async with engine_for(stack.settings) as engine:
        parent = await submit(engine, "demo.fanout", payload)
        await drain(engine, sql, [parent], deadline=45)
        kids = [k["id"] for k in children_of(sql, parent)]
        await drain(engine, sql, kids, deadline=30)
    row = job_row(sql, parent)
    assert row["state"] == JobState.SUCCEEDED, describe(sql, parent)
    result = row["result"]
    assert result["children"] == 20 and result["succeeded"] >= 15, result
    assert (
        result["failed"] <= 3
        and sum(result[k] for k in ("succeeded", "failed", "unfinished")) == 20
    )
    kids_rows = children_of(sql, parent)
    assert len(kids_rows) == 20 and {k["tenant"] for k in kids_rows} == {row["tenant"]}
    states = {k["spawn_key"]: k["state"] for k in kids_rows}
    assert {k for k, s in states.items() if s == JobState.DEAD_LETTERED} == {
        "child-3",
        "child-7",
        "child-11",
    }
    assert sum(s == JobState.SUCCEEDED for s in states.values()) == 17
    assert row["runs"] == 2, describe(sql, parent)  # spawned and waited; woken once, gathered
    woken = [e for e in timeline(sql, parent) if e["from_state"] == JobState.WAITING]
    assert len(woken) == 1, describe(sql, parent)
    check_invariants(sql, stack, [parent, *kids])


@pytest.mark.asyncio
async def test_a_spawn_run_again_after_its_record_was_lost_makes_no_second_child(
    stack: Stack, sql: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The parent's attempt ends between the child's insert and the spawn's record (as a
    crash there would): the next attempt spawns under the same key and gets that child."""
    record = store.effects.record
    lost: list[str] = []

    async def lost_once(db: Any, **kw: Any) -> Any:
        if kw["key"].startswith("spawn:") and not lost:
            lost.append(kw["key"])
            raise errors.LeaseLost()  # the attempt stops here, writing nothing more
        return await record(db, **kw)

    monkeypatch.setattr(store.effects, "record", lost_once)
    async with engine_for(stack.settings) as engine:
        parent = await submit(engine, "demo.fanout", {"children": 1})
        await drain(engine, sql, [parent])
    assert lost == ["spawn:child-0"]
    row = job_row(sql, parent)
    assert row["state"] == JobState.SUCCEEDED, describe(sql, parent)
    kids = children_of(sql, parent)
    assert [k["spawn_key"] for k in kids] == ["child-0"], kids
    assert row["attempt"] == 2 and row["result"]["succeeded"] == 1, describe(sql, parent)
    spawned = sql.execute(
        "SELECT result FROM effects WHERE job_id = %s AND key = 'spawn:child-0'", (parent,)
    ).fetchone()
    assert spawned["result"] == str(kids[0]["id"])
    check_invariants(sql, stack, [parent, kids[0]["id"]])


@pytest.mark.asyncio
async def test_cancelling_a_parent_mid_gather_cancels_its_unfinished_children(
    stack: Stack, sql: Any
) -> None:
    async with engine_for(stack.settings) as engine:
        parent = await submit(engine, "demo.fanout", {"children": 3, "child_seconds": 600})
        await handle_next(engine, sql, parent)
        assert job_row(sql, parent)["wait_kind"] == "children"
        kids = [k["id"] for k in children_of(sql, parent)]
        await handle_next(engine, sql, *kids)
        states = [k["state"] for k in children_of(sql, parent)]
        assert JobState.WAITING in states, states

        await jobs.cancel(engine.db, parent, scope=None)
    assert job_row(sql, parent)["state"] == JobState.CANCELLED, describe(sql, parent)
    for kid in kids:
        row = job_row(sql, kid)
        assert row["state"] == JobState.CANCELLED, describe(sql, kid)
        assert row["wait_kind"] is None
        assert timeline(sql, kid)[-1]["detail"] == f"parent {parent} cancelled"
    check_invariants(sql, stack, [parent, *kids])


@pytest.mark.asyncio
async def test_a_duplicate_message_of_a_waiting_job_changes_nothing(stack: Stack, sql: Any) -> None:
    async with engine_for(stack.settings) as engine:
        on_callback, _ = await waiting_for_approval(engine, sql, 600)
        on_children = await submit(engine, "demo.fanout", {"children": 1, "child_seconds": 600})
        await handle_next(engine, sql, on_children)
        assert job_row(sql, on_children)["wait_kind"] == "children"
        waiting = [on_callback, on_children]
        before = {j: (job_row(sql, j), timeline(sql, j)) for j in waiting}

        await engine.queue.send_jobs(routes(*waiting))
        await handle_next(engine, sql, *waiting)
    for j in waiting:
        row, events = job_row(sql, j), timeline(sql, j)
        was, was_events = before[j]
        same = ("state", "attempt", "runs", "wait_kind", "wait_key", "wake_at", "wait_rule")
        assert {k: row[k] for k in same} == {k: was[k] for k in same}, describe(sql, j)
        assert events == was_events, describe(sql, j)
    check_invariants(sql, stack, waiting, settled=False)


# --- the rule, in Python and in SQL -----------------------------------------------


@pytest.mark.asyncio
async def test_the_sql_gather_rule_agrees_with_the_python_one(stack: Stack, sql: Any) -> None:
    """gather_decided (migration 0007) decides exactly when Rule.decide does: every state
    of up to four children, under every rule over them, in one query."""
    states = ["succeeded", "dead_lettered", "cancelled", "queued", "stalled"]
    async with engine_for(stack.settings) as engine:
        # Four jobs in each state; the i-th child in state s is job[s][i].
        job = {s: [str(await submit(engine, "demo.noop", {})) for _ in range(4)] for s in states}
    for s, ids in job.items():
        sql.execute("UPDATE jobs SET state = %s::job_state WHERE id = ANY(%s::uuid[])", (s, ids))
    seen = {"succeeded": "succeeded", "dead_lettered": "failed", "cancelled": "failed"}
    cases: list[tuple[Rule, dict[str, Any]]] = []
    for n in range(5):
        for picked in itertools.product(states, repeat=n):
            children = [job[s][i] for i, s in enumerate(picked)]
            as_seen = {c: seen.get(s, "unfinished") for c, s in zip(children, picked, strict=True)}
            for at_least in [*range(n + 1), "all"]:
                for tolerate in (None, 0, 1, 2):
                    cases.append((Rule.of(children, at_least, tolerate), as_seen))  # type: ignore[arg-type]
    rows = sql.execute(
        "SELECT gather_decided(r) AS d FROM jsonb_array_elements(%s::jsonb) "
        "WITH ORDINALITY AS x(r, i) ORDER BY i",
        (json.dumps([r.to_json() for r, _ in cases]),),
    ).fetchall()
    outcomes = set()
    for (r, as_seen), row in zip(cases, rows, strict=True):
        in_python = r.decide(as_seen)  # type: ignore[arg-type]
        assert row["d"] == (in_python is not None), (r, as_seen, in_python)
        outcomes.add(in_python)
    assert outcomes == {True, False, None}  # every outcome was met


@pytest.mark.asyncio
async def test_the_invariants_pass_a_waiting_job_but_not_one_whose_answer_came(
    stack: Stack, sql: Any
) -> None:
    """A checker that cannot fail proves nothing: forge an answer that woke nobody."""
    async with engine_for(stack.settings) as engine:
        job_id, _ = await waiting_for_approval(engine, sql, 600)
    check_invariants(sql, stack, [job_id], settled=False)  # waiting: on its way
    with pytest.raises(pytest.fail.Exception, match="1: state waiting after the drain"):
        check_invariants(sql, stack, [job_id])  # but not settled

    sql.execute("UPDATE callbacks SET state = 'succeeded' WHERE job_id = %s", (job_id,))
    with pytest.raises(pytest.fail.Exception) as failed:
        check_invariants(sql, stack, [job_id], settled=False)
    assert "still waiting for callback 'approve' whose condition is met" in str(failed.value)


@pytest.mark.asyncio
async def test_a_wake_up_that_raced_its_due_time_is_sent_again_at_once(
    stack: Stack, sql: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The claim read the clock a moment before the timer was due, the look after it a
    moment after: the message must not be dropped (only the sweeper's grace, a minute by
    default, would wake the job then)."""
    async with engine_for(stack.settings) as engine:
        job_id = await submit(engine, "demo.nap", {"seconds": 1})
        await handle_next(engine, sql, job_id)
        wait_until_db_passes(sql, job_row(sql, job_id)["wake_at"])
        claim = store.leases.claim_batch
        missed: list[int] = []

        async def too_early(db: Any, **kw: Any) -> Any:
            if not missed:
                missed.append(len(kw["job_ids"]))
                return {}
            return await claim(db, **kw)

        monkeypatch.setattr(store.leases, "claim_batch", too_early)
        await handle_next(engine, sql, job_id)
        assert missed == [1] and job_row(sql, job_id)["state"] == JobState.WAITING
        await drain(engine, sql, [job_id], deadline=10)
    row = job_row(sql, job_id)
    assert row["state"] == JobState.SUCCEEDED, describe(sql, job_id)
    assert row["runs"] == 2, describe(sql, job_id)
    check_invariants(sql, stack, [job_id])
