"""Concurrent single submissions admitted and written in one statement.

Under load a long-running API process answers many ``POST /v1/jobs`` at once, each one
statement (insert_jobs) of its own. Gathered the way the sends already are
(``app.batching``: a lone request waits for nothing, the ones that arrive while a
statement runs go together in the next), one statement admits and writes them all, as
``POST /v1/jobs/batch`` does: one plan, one round trip, one commit for up to
``MAX_GATHERED`` jobs (issue 37).

Nothing a request sees changes. Requests are gathered only with others of the same
tenant, API key and limits. When the gathered statement admits them all, each request
gets its own jobs, outbox rows and delayed jobs from it; a request whose row the
statement did not write (an Idempotency-Key already used, or used by another request of
the same statement) goes on as any replay does. When it refuses (a limit, a conflict, a
revoked key) it wrote nothing, and each request is run again on its own, one after the
other in the order they came, so each is admitted or refused as it would have been
alone (one process's statements run one at a time, so its requests at the edge of a
limit no longer race each other). A statement that fails for a reason of one request's
making (PostgreSQL refusing a value) does the same, and only that request gets the
error; one that cannot reach PostgreSQL fails them all, as it would each.
"""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import Sequence
from dataclasses import dataclass

from app import errors, store
from app.batching import Batcher
from app.store.jobs import Insertion, Limits, NewRow

# Jobs one gathered statement writes at most (POST /v1/jobs/batch's own limit).
MAX_GATHERED = 100
# Gathered statements one process runs at once: the next gathers while it runs.
STATEMENTS_AT_ONCE = 1


@dataclass(frozen=True, slots=True)
class _Failed:
    """The error one gathered request's own statement raised, handed back to it alone."""

    error: Exception


@dataclass(frozen=True, slots=True)
class _Ask:
    rows: Sequence[NewRow]
    tenant: str
    limits: Limits
    key_id: str | None


class Gatherer:
    """One process's (one pool's) gathering of its submissions' statements."""

    def __init__(self, db: store.Database) -> None:
        self._db = db
        self._batcher: Batcher[_Ask, Insertion | _Failed] = Batcher(
            self._flush, max_size=MAX_GATHERED, max_in_flight=STATEMENTS_AT_ONCE
        )

    async def insert(
        self, rows: Sequence[NewRow], *, tenant: str, limits: Limits, key_id: str | None
    ) -> Insertion:
        """As ``store.jobs.insert``, in a statement shared with concurrent requests."""
        got = await self._batcher.submit(_Ask(rows, tenant, limits, key_id))
        if isinstance(got, _Failed):
            raise got.error
        return got

    async def _alone(self, ask: _Ask) -> Insertion:
        return await store.jobs.insert(
            self._db, ask.rows, tenant=ask.tenant, limits=ask.limits, key_id=ask.key_id
        )

    async def _flush(self, asks: list[_Ask]) -> list[Insertion | _Failed]:
        """One statement per tenant, key and limits among ``asks``."""
        groups: dict[tuple[str, str | None, Limits], list[int]] = {}
        for i, ask in enumerate(asks):
            groups.setdefault((ask.tenant, ask.key_id, ask.limits), []).append(i)
        answers: dict[int, Insertion | _Failed] = {}

        async def run(members: list[int]) -> None:
            got = await self._together([asks[i] for i in members])
            answers.update(zip(members, got, strict=True))

        await asyncio.gather(*(run(members) for members in groups.values()))
        return [answers[i] for i in range(len(asks))]

    async def _one_by_one(self, asks: list[_Ask]) -> list[Insertion | _Failed]:
        """Each on its own statement, in order; an error is its own request's."""
        out: list[Insertion | _Failed] = []
        for ask in asks:
            try:
                out.append(await self._alone(ask))
            except Exception as exc:
                out.append(_Failed(exc))
        return out

    async def _together(self, asks: list[_Ask]) -> list[Insertion | _Failed]:
        if len(asks) == 1:
            return await self._one_by_one(asks)
        first = asks[0]
        try:
            written = await store.jobs.insert(
                self._db,
                [row for ask in asks for row in ask.rows],
                tenant=first.tenant,
                limits=first.limits,
                key_id=first.key_id,
            )
        except errors.StoreError:
            raise  # PostgreSQL unreachable: so it is for each of them
        except Exception:
            return await self._one_by_one(asks)  # a value one of them sent
        verdict = written.admission
        admitted = (
            verdict.key_ok
            and verdict.rate_ok
            and verdict.flight_ok
            and verdict.conflict_ord is None
            and written.fork_ok
        )
        if not admitted:
            return await self._one_by_one(asks)  # nothing was written: each decides alone
        return [_share(written, ask) for ask in asks]


def _share(written: Insertion, ask: _Ask) -> Insertion:
    """The part of a gathered statement's answer that is ``ask``'s."""
    ids = {row.id for row in ask.rows}
    return Insertion(
        admission=written.admission,
        jobs=[job for job in written.jobs if job.id in ids],
        outbox=[row for row in written.outbox if row.job_id in ids],
        delayed=[job_id for job_id in written.delayed if job_id in ids],
    )


_gatherers: weakref.WeakKeyDictionary[store.Database, Gatherer] = weakref.WeakKeyDictionary()


def gatherer(db: store.Database) -> Gatherer:
    """``db``'s gatherer (one per pool, made on first use)."""
    found = _gatherers.get(db)
    if found is None:
        found = _gatherers[db] = Gatherer(db)
    return found
