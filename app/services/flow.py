"""Flow control by key at submission (docs/howto/flow-control.md).

A job whose kind decides per key when it is submitted (``if_active`` reject,
cancel_active or drop_new; ``debounce_seconds``) is written in one transaction that
locks its keys (submissions to one key take turns), looks at the key's open jobs, writes
it through the submit path's own insert (admission included), and cancels the jobs it
replaces, naming it. A refusal (409, 429) rolls everything back: nothing changes.

The limits a claim enforces (concurrency, rate) need none of this: they are columns of
the job row, read by the worker's claim (store/sql/queries/leases.sql).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from app import crashpoints, errors, metrics, store
from app.store.endings import count as count_ends
from app.store.jobs import Insertion, Limits, NewRow
from app.store.records import Job


@dataclass
class KeyedInsertion:
    """What the keyed submission wrote, and what its policies answered instead."""

    written: Insertion | None  # None: every job was answered by a policy (drop_new)
    answered: dict[int, Job] = field(default_factory=dict)  # row index -> the active job
    ends: list[dict[str, Any]] = field(default_factory=list)  # the jobs it cancelled
    replaced: dict[tuple[str, str], int] = field(default_factory=dict)  # (kind, how) -> jobs


def decides(row: NewRow) -> bool:
    """The row's submission looks at its key's jobs."""
    return row.flow_key is not None and (
        row.if_active != "enqueue" or row.debounce_seconds is not None
    )


def check_batch(rows: Sequence[NewRow], batch: bool) -> None:
    """Two jobs of one batch on one key whose kind decides per key: refused (which would
    replace, reject or drop which is not a question a batch can answer)."""
    seen: dict[tuple[str, str], int] = {}
    for i, row in enumerate(rows):
        if not decides(row):
            continue
        assert row.flow_key is not None
        first = seen.setdefault((row.kind, row.flow_key), i)
        if first != i and batch:
            raise errors.BadRequest(
                f"jobs[{i}]: key {row.flow_key!r} of kind {row.kind!r} is also jobs[{first}]'s, "
                "and the kind decides per key at submission (if_active or debounce): "
                "submit them one by one"
            )


async def insert(
    db: store.Database,
    rows: list[NewRow],
    *,
    tenant: str,
    limits: Limits,
    key_id: str | None,
    batch: bool,
) -> KeyedInsertion:
    """Lock the keys, apply each row's policy, write the rest and cancel what they replace,
    in one transaction (run again whole if it lost a deadlock)."""

    async def work(conn: store.Conn) -> KeyedInsertion:
        return await insert_txn(
            conn, rows, tenant=tenant, limits=limits, key_id=key_id, batch=batch
        )

    return await db.transact(work)


async def insert_txn(
    conn: store.Conn,
    rows: list[NewRow],
    *,
    tenant: str,
    limits: Limits,
    key_id: str | None,
    batch: bool,
) -> KeyedInsertion:
    """As ``insert``, inside the caller's transaction (a schedule's slot: the job, what it
    replaces and the schedule's next slot commit together). A refusal (errors.Conflict,
    if_active reject) is raised before anything is written: the transaction is still
    usable, and the caller decides whether it rolls back."""
    check_batch(rows, batch)
    keys = sorted({(r.kind, r.flow_key) for r in rows if decides(r) and r.flow_key is not None})
    await store.flow.lock_keys(conn, tenant, keys)
    open_jobs = await store.flow.open_jobs(conn, tenant, keys)
    replays = await store.flow.used_idempotency_keys(
        conn, tenant, [r.idempotency_key for r in rows if r.idempotency_key is not None]
    )
    out = KeyedInsertion(written=None)
    kept: list[NewRow] = []
    for i, row in enumerate(rows):
        active = _active(open_jobs, row) if decides(row) else []
        if active and row.idempotency_key not in replays:
            if row.if_active == "reject":
                _reject(row, active[0], i, batch)
            if row.if_active == "drop_new":
                out.answered[i] = active[0]
                continue
        kept.append(row)
    if kept:
        out.written = await store.jobs.insert_txn(
            conn, kept, tenant=tenant, limits=limits, key_id=key_id
        )
        await _replace(conn, out, kept, open_jobs)
    return out


def _active(open_jobs: list[Job], row: NewRow) -> list[Job]:
    """The key's active jobs (not finished, not still debouncing), oldest first."""
    return [
        j
        for j in open_jobs
        if j.kind == row.kind and j.flow_key == row.flow_key and j.wait_key != "debounce"
    ]


def _reject(row: NewRow, active: Job, index: int, batch: bool) -> None:
    metrics.count(metrics.KEY_DECISIONS, kind=row.kind, decision="rejected")
    where = f"jobs[{index}]: " if batch else ""
    raise errors.Conflict(
        f"{where}key {row.flow_key!r} of kind {row.kind!r} has an active job, {active.id} "
        f"({active.state}), and the kind's if_active is 'reject': submit again once it "
        "has ended, or cancel it"
    )


async def _replace(
    conn: store.Conn, out: KeyedInsertion, kept: list[NewRow], open_jobs: list[Job]
) -> None:
    """Each new job cancels the jobs of its key it replaces: the ones still debouncing
    (debounce), or the active ones (cancel_active; a running one is asked to stop)."""
    assert out.written is not None
    made = {job.id for job in out.written.jobs}
    for row in kept:
        if row.id not in made or not decides(row):
            continue
        if row.debounce_seconds is not None:
            how, victims = (
                "debounced",
                [
                    j
                    for j in open_jobs
                    if j.kind == row.kind
                    and j.flow_key == row.flow_key
                    and j.wait_key == "debounce"
                ],
            )
            detail = f"debounced: replaced by job {row.id}, a newer job of its key"
        elif row.if_active == "cancel_active":
            how, victims = "cancelled_active", _active(open_jobs, row)
            detail = f"cancelled: replaced by job {row.id} (its kind's if_active cancel_active)"
        else:
            continue
        for victim in victims:
            ends = await store.jobs.cancel_waiting_txn(conn, victim.id, detail=detail)
            if not ends:
                ends = await store.jobs.request_cancel_txn(conn, victim.id)
                if ends:
                    await store.flow.note_cancel_asked(conn, victim.id, f"cancel asked: {detail}")
            out.ends.extend(ends)
        if victims:
            out.replaced[(row.kind, how)] = out.replaced.get((row.kind, how), 0) + len(victims)


def after_commit(out: KeyedInsertion, rows: Sequence[NewRow]) -> None:
    """Count what the policies did, then the crash points of the replacements (the new
    jobs committed, their messages or wake-ups not sent)."""
    count_ends(out.ends)
    for (kind, decision), n in out.replaced.items():
        metrics.count(metrics.KEY_DECISIONS, n, kind=kind, decision=decision)
    for index in out.answered:
        metrics.count(metrics.KEY_DECISIONS, kind=rows[index].kind, decision="dropped")
    hows = {how for _, how in out.replaced}
    if "debounced" in hows:
        crashpoints.hit(crashpoints.Point.AFTER_DEBOUNCE_REPLACED)
    if "cancelled_active" in hows:
        crashpoints.hit(crashpoints.Point.AFTER_ACTIVE_CANCELLED)
