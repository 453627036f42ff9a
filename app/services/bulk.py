"""Bulk actions: cancel, redrive or re-run every job a filter (app/services/filters.py)
matches.

POST /v1/bulk counts the matching jobs (a dry run answers that count and stops), writes
a bulk operation (store/bulk.py) held by its runner's lease, and runs it in the
background: batches of TASKLEASE_BULK_BATCH_SIZE jobs by id, each one transaction in
which the batch's jobs are locked, acted on through the single-job statements (a
cancel's, a redrive's), and the operation's cursor and counts move past them. A runner
that dies between batches leaves the cursor after the last batch committed; the sweeper
takes the operation over once its lease expired and goes on from there. So each job is
acted on at most once, and every matching job is looked at once: acted on (done), found
with nothing to do (skipped: already finished, already redriven) or refused (failed: a
redrive past the job's redrive budget).

An action is one small function over a batch of job ids inside the batch's transaction
(``ACTIONS``); what it ended is counted and what it queued is sent after the commit.

A re-run (``OUTSIDE``) makes new jobs through the submit path, which admits and commits
on its own: each job of the batch is re-run (services/reruns.py) with an idempotency key
of the operation and the job, then the cursor moves past them. A runner that dies
between the two leaves the cursor before the batch, and whoever runs it again finds the
re-runs already made by their keys: each job is re-run once. A tenant's limit that
refuses a re-run (429) ends the batch there, after a pause the operation goes on.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from app import crashpoints, errors, metrics, store
from app.services import auth, bulk_rerun, filters, outbox
from app.settings.config import Settings
from app.states import JobState
from app.store.bulk import BulkOperation, Counts
from app.store.endings import count as count_ends
from app.store.records import OutboxRow
from app.transport import Transport

log = logging.getLogger(__name__)

# Operations the sweeper takes over per pass, and how long it runs them before it goes on
# with its other work (an operation not finished then is taken over again once its lease
# expired, by the next pass).
TAKE_OVER_LIMIT = 10
RESUME_SECONDS = 20.0
# What a cancel may act on: every state but the finished ones.
CANCELLABLE = [s for s in JobState if not s.terminal]


@dataclass(frozen=True)
class Context:
    """What an action knows of its operation: the event detail it writes, its settings."""

    settings: Settings
    detail: str


@dataclass
class Outcome:
    """A batch's counts, and what to do after its commit: ends to count, rows to send."""

    counts: Counts = field(default_factory=Counts)
    ended: list[dict[str, Any]] = field(default_factory=list)
    outbox: list[OutboxRow] = field(default_factory=list)
    redriven: int = 0


Action = Callable[[store.Conn, Sequence[uuid.UUID], Context], Awaitable[Outcome]]


async def _cancel(conn: store.Conn, ids: Sequence[uuid.UUID], ctx: Context) -> Outcome:
    """Each job cancelled as POST /v1/jobs/{id}/cancel does (services/jobs.py): at once
    when no live lease holds it, else its worker asked to stop. The rows are locked by the
    batch, so no lease ends between the two statements."""
    out = Outcome()
    done = skipped = 0
    for job_id in ids:
        rows = await store.jobs.cancel_waiting_txn(conn, job_id, detail=ctx.detail)
        if not rows:
            rows = await store.jobs.request_cancel_txn(conn, job_id)
        if rows:
            done += 1
            out.ended.extend(rows)
        else:
            skipped += 1  # finished meanwhile
    out.counts = Counts(done=done, skipped=skipped)
    return out


async def _redrive(conn: store.Conn, ids: Sequence[uuid.UUID], ctx: Context) -> Outcome:
    """Each dead letter reset with an outbox row, as POST /v1/jobs/{id}/redrive does
    (services/redrive.py), within its redrive budget; the stale dead letter is deleted
    later by the sweeper."""
    rows = await store.dead_letters.reset_txn(
        conn,
        ids,
        with_outbox=True,
        detail=ctx.detail,
        redrive=store.leases.RedriveBudget.of(ctx.settings),
    )
    refused = sum(1 for r in rows if r.refused)
    done = len(rows) - refused
    return Outcome(
        counts=Counts(done=done, skipped=len(ids) - len(rows), failed=refused),
        outbox=[OutboxRow(id=r.outbox_id, job_id=r.id) for r in rows if r.outbox_id is not None],
        redriven=done,
    )


# The actions POST /v1/bulk accepts: a function over one batch of job ids inside the
# batch's transaction (ACTIONS), or one that submits on its own (OUTSIDE: a re-run).
ACTIONS: dict[str, Action] = {"cancel": _cancel, "redrive": _redrive}
OUTSIDE = {"rerun": bulk_rerun.rerun_batch}
# The states each action can act on: a filter's states are narrowed to these.
ACTS_ON: dict[str, list[JobState]] = {
    "cancel": CANCELLABLE,
    "redrive": [JobState.DEAD_LETTERED],
    "rerun": [JobState.SUCCEEDED, JobState.DEAD_LETTERED, JobState.CANCELLED],
}


def narrowed(action: str, flt: filters.JobFilter) -> filters.JobFilter:
    """The filter limited to the states ``action`` acts on; BadRequest when it names
    only others (e.g. a redrive of succeeded jobs)."""
    if action not in ACTS_ON:
        raise errors.BadRequest(f"action must be one of {sorted(ACTS_ON)}, not {action!r}")
    allowed = ACTS_ON[action]
    if flt.states is None:
        return flt.model_copy(update={"states": allowed})
    states = [s for s in flt.states if s in allowed]
    if not states:
        raise errors.BadRequest(
            f"{action} acts on jobs in states {[str(s) for s in allowed]}: "
            f"the filter's states {[str(s) for s in flt.states]} name none of them"
        )
    return flt.model_copy(update={"states": states})


@dataclass(frozen=True)
class Started:
    """POST /v1/bulk's answer: the count, and the operation unless a dry run."""

    total: int
    operation: BulkOperation | None


def scope_of(caller: auth.Principal, flt: filters.JobFilter) -> str | None:
    """The tenant whose jobs the caller may act on: its own (a tenant key naming another
    is Forbidden), or an admin's choice (None: every tenant)."""
    if flt.tenant is not None and not caller.admin and flt.tenant != caller.tenant:
        raise auth.Forbidden("a tenant key acts only on its own tenant's jobs")
    return flt.tenant or caller.scope


def caller_name(caller: auth.Principal) -> str:
    return f"{caller.via}:{caller.key_id or caller.tenant}"


async def start(
    settings: Settings,
    db: store.Database,
    queue: Transport,
    caller: auth.Principal,
    *,
    action: str,
    flt: filters.JobFilter,
    dry_run: bool,
) -> Started:
    """Count the jobs ``flt`` matches for ``action``; unless ``dry_run``, write the
    operation and run it in the background of this process (the sweeper finishes it if
    this process dies)."""
    flt = narrowed(action, flt)
    tenant = scope_of(caller, flt)
    total = await store.search.count(db, flt.params(scope=tenant))
    if dry_run:
        return Started(total=total, operation=None)
    token = uuid.uuid4()
    op = await store.bulk.create(
        db,
        tenant=tenant,
        action=action,
        filter_=flt.canonical(),
        caller=caller_name(caller),
        total=total,
        token=token,
        lease_seconds=settings.bulk_lease_seconds,
    )
    log.info(
        "bulk operation started",
        extra={"bulk_id": str(op.id), "action": action, "caller": op.caller, "total": total},
    )
    _spawn(run(settings, db, queue, op, token))
    return Started(total=total, operation=op)


_RUNNING: set[asyncio.Task[BulkOperation | None]] = set()


def _spawn(work: Awaitable[BulkOperation | None]) -> None:
    async def wrapped() -> BulkOperation | None:
        return await work

    task = asyncio.create_task(wrapped())
    _RUNNING.add(task)  # kept until done: the loop holds tasks only weakly
    task.add_done_callback(_RUNNING.discard)


async def get(db: store.Database, op_id: uuid.UUID, *, scope: str | None) -> BulkOperation:
    """The operation, if the caller may see it (another tenant's is NotFound)."""
    op = await store.bulk.get(db, op_id, tenant=scope)
    if op is None or (scope is not None and op.tenant != scope):
        raise errors.NotFound(f"no bulk operation {op_id}")
    return op


async def listing(db: store.Database, *, scope: str | None, limit: int) -> list[BulkOperation]:
    return await store.bulk.listing(db, tenant=scope, limit=limit)


async def run(
    settings: Settings,
    db: store.Database,
    queue: Transport,
    op: BulkOperation,
    token: uuid.UUID,
    *,
    until: float | None = None,
) -> BulkOperation | None:
    """Run the operation's batches from its cursor until none is left (done), another
    runner holds it, the store fails or the loop's clock passes ``until`` (left running:
    the sweeper resumes it once the lease expired). Answers the finished operation, or
    None."""
    if op.action in OUTSIDE:
        return await _run_outside(bulk_rerun.Rerun(settings, db, queue, op), token, until=until)
    flt = filters.parse(op.filter)
    params = flt.params(scope=op.tenant)
    ctx = Context(settings=settings, detail=f"{op.action} by bulk operation {op.id} ({op.caller})")
    action = ACTIONS[op.action]
    lease = settings.bulk_lease_seconds
    size = settings.bulk_batch_size

    async def batch(conn: store.Conn) -> Outcome | None:
        held = await store.bulk.hold_txn(conn, op.id, token=token, lease_seconds=lease)
        if held is None:
            return None
        ids = await store.search.batch_txn(
            conn, params, cursor=held.cursor, made_before=held.created_at, limit=size
        )
        if not ids:
            return Outcome()
        outcome = await action(conn, ids, ctx)
        await store.bulk.advance_txn(
            conn, op.id, token=token, cursor=ids[-1], counts=outcome.counts
        )
        return outcome

    async def one() -> bool | None:
        outcome = await db.transact(batch)
        if outcome is None or outcome.counts == Counts():
            return None if outcome is None else False
        await _after_commit(db, queue, outcome)
        return True

    return await _batches(db, op, token, one, until=until)


async def _run_outside(
    r: bulk_rerun.Rerun, token: uuid.UUID, *, until: float | None
) -> BulkOperation | None:
    """``run`` for an action that submits on its own (a re-run): the batch picked under the
    lease, acted on, then the cursor and counts moved past what it looked at."""
    op, lease = r.op, r.settings.bulk_lease_seconds
    params = filters.parse(op.filter).params(scope=op.tenant)

    async def pick(conn: store.Conn) -> list[uuid.UUID] | None:
        held = await store.bulk.hold_txn(conn, op.id, token=token, lease_seconds=lease)
        if held is None:
            return None
        return list(
            await store.search.batch_txn(
                conn,
                params,
                cursor=held.cursor,
                made_before=held.created_at,
                limit=r.settings.bulk_batch_size,
            )
        )

    def advance(last: uuid.UUID, counts: Counts) -> Callable[[store.Conn], Awaitable[bool]]:
        async def txn(conn: store.Conn) -> bool:
            if await store.bulk.hold_txn(conn, op.id, token=token, lease_seconds=lease) is None:
                return False
            await store.bulk.advance_txn(conn, op.id, token=token, cursor=last, counts=counts)
            return True

        return txn

    async def one() -> bool | None:
        ids = await r.db.transact(pick)
        if not ids:
            return None if ids is None else False
        counts, seen = await bulk_rerun.rerun_batch(ids, r)
        crashpoints.hit(crashpoints.Point.AFTER_BULK_RERUNS, bulk_id=str(op.id))
        if seen and not await r.db.transact(advance(ids[seen - 1], counts)):
            return None
        return True

    return await _batches(r.db, op, token, one, until=until)


async def _batches(
    db: store.Database,
    op: BulkOperation,
    token: uuid.UUID,
    one: Callable[[], Awaitable[bool | None]],
    *,
    until: float | None,
) -> BulkOperation | None:
    """``one()`` batch after another: True, a batch was done; False, none is left (the
    operation is finished); None, another runner took it over or it finished. Stops
    (left running, for the sweeper) on a store or carrier failure or past ``until``;
    another failure finishes the operation with its error."""
    try:
        while True:
            more = await one()
            if more is None:
                return None
            if not more:
                return await store.bulk.finish(db, op.id, token=token)
            crashpoints.hit(crashpoints.Point.AFTER_BULK_BATCH, bulk_id=str(op.id))
            if until is not None and asyncio.get_running_loop().time() > until:
                return None
    except (errors.StoreError, errors.QueueError) as exc:
        log.warning("bulk operation %s paused, the sweeper resumes it: %s", op.id, exc)
        return None
    except errors.TaskleaseError as exc:
        log.exception("bulk operation %s failed", op.id)
        return await store.bulk.finish(db, op.id, token=token, error=str(exc))


async def _after_commit(db: store.Database, queue: Transport, outcome: Outcome) -> None:
    count_ends(outcome.ended)
    if outcome.redriven:
        metrics.count(metrics.REDRIVES, outcome.redriven)
    if outcome.outbox:
        # A send that fails leaves its rows to the sweeper's outbox relay.
        await outbox.send(db, queue, outcome.outbox)


async def resume(settings: Settings, db: store.Database, queue: Transport) -> int:
    """The sweeper's part: run the operations whose runner died (lease expired) from their
    cursor. Answers how many it took over."""
    token = uuid.uuid4()
    ops = await store.bulk.take_over(
        db, token=token, lease_seconds=settings.bulk_lease_seconds, limit=TAKE_OVER_LIMIT
    )
    until = asyncio.get_running_loop().time() + RESUME_SECONDS
    for op in ops:
        log.info("bulk operation resumed", extra={"bulk_id": str(op.id), "cursor": str(op.cursor)})
        await run(settings, db, queue, op, token, until=until)
    return len(ops)
