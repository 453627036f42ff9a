"""Leases: claim a batch, start it, heartbeat, finish or succeed, fenced by each lease's
token; and the sweeper's view of leases that expired or messages that may be lost."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, TypedDict, Unpack

from psycopg.types.json import Jsonb

from app.priorities import Route
from app.settings.config import Settings
from app.states import JobState
from app.store import endings
from app.store.pool import Database, q
from app.store.records import Job, OutboxRow


@dataclass(frozen=True)
class RedriveBudget:
    """At most ``budget`` redrives of a job within ``window_seconds``."""

    budget: int
    window_seconds: int

    @classmethod
    def of(cls, settings: Settings) -> RedriveBudget:
        """TASKLEASE_REDRIVE_BUDGET within TASKLEASE_REDRIVE_WINDOW_SECONDS."""
        return cls(settings.redrive_budget, settings.redrive_window_seconds)

    def refusal(self) -> str:
        """Why a redrive past the budget is refused (the job's last_error and event)."""
        return (
            f"redrive budget used up: {self.budget} redrives within {self.window_seconds} s "
            "(TASKLEASE_REDRIVE_BUDGET, TASKLEASE_REDRIVE_WINDOW_SECONDS); "
            "redrive deliberately with `tasklease redrive --job ID --force`."
        )


@dataclass(frozen=True)
class Verdict:
    """A claimed job; or, ``refused``, a redrive past the job's redrive budget: nothing
    was claimed, the job stays dead-lettered and the message is to be deleted unrun; or,
    ``deferred``, a job whose tenant is at its running cap: nothing was written and the
    message is to be handed back (``backlog``: the tenant's jobs waiting for a slot,
    ``cap``: its cap)."""

    job: Job
    refused: bool
    from_state: str | None = None  # the state the claim found: 'waiting' is a wake-up
    deferred: bool = False
    backlog: int = 0
    cap: int = 0
    has_parked: bool = False  # the tenant has parked jobs: release one when the lease ends
    parked_now: bool = False  # deferred and parked: a lease's end releases it
    # Deferred by its key (flow control): 'key' (its key's concurrency; parked when
    # queued), 'rate' (its key's rate; back in key_wait seconds); None: its tenant's cap.
    held_by: str | None = None
    key_wait: float | None = None


async def claim_batch(
    db: Database,
    *,
    job_ids: Sequence[uuid.UUID],
    tokens: Sequence[uuid.UUID],
    generations: Sequence[int | None],
    owner: str,
    lease_seconds: float,
    redrive: RedriveBudget,
    max_running: int,
) -> dict[uuid.UUID, Verdict]:
    """Claim each job with its fresh token (one statement), each tenant held to its
    running cap (``max_running`` unless tenant_limits says otherwise); the verdicts by
    token (a delivery that was neither claimed, refused nor deferred is left out)."""
    rows = await db.fetch_after_lock(
        q("lock_claim_tenants"),
        q("claim_batch"),
        {
            "ids": list(job_ids),
            "tokens": list(tokens),
            "generations": list(generations),
            "owner": owner,
            "lease_seconds": lease_seconds,
            "redrive_budget": redrive.budget,
            "redrive_window": redrive.window_seconds,
            "refusal": redrive.refusal(),
            "max_running": max_running,
        },
    )
    return {
        row["token"]: Verdict(
            Job.from_row(row),
            bool(row["refused"]),
            row["from_state"],
            deferred=bool(row["deferred"]),
            backlog=int(row["backlog"]),
            cap=int(row["cap"]),
            has_parked=bool(row["has_parked"]),
            parked_now=bool(row["parked_now"]),
            held_by=row["held_by"],
            key_wait=row["key_wait"],
        )
        for row in rows
    }


@dataclass(frozen=True)
class Started:
    """A started job: the kind's version it first started on (None: not recorded, it
    started before versions were) and its recorded steps, (key, result, shape) in order."""

    kind_version: str | None
    steps: list[tuple[str, Any, str | None]]


async def start_batch(
    db: Database, items: Sequence[tuple[uuid.UUID, uuid.UUID, str]]
) -> dict[uuid.UUID, Started]:
    """leased -> running for each (job id, token, the version of the kind's code that
    starts it: recorded at the job's first start), by token."""
    rows = await db.fetch(
        q("start_batch"),
        {
            "ids": [job_id for job_id, _, _ in items],
            "tokens": [token for _, token, _ in items],
            "versions": [version for _, _, version in items],
        },
    )
    return {
        row["token"]: Started(
            row["kind_version"], [(key, result, shape) for key, result, shape in row["effects"]]
        )
        for row in rows
    }


@dataclass(frozen=True)
class Beat:
    """A heartbeat the lease holder won: the lease is extended."""

    cancel_requested: bool


async def heartbeat(
    db: Database, job_id: uuid.UUID, token: uuid.UUID, *, lease_seconds: float
) -> Beat | None:
    """Extend the lease; None when it is no longer this token's."""
    rows = await db.fetch(
        q("heartbeat"), {"id": job_id, "token": token, "lease_seconds": lease_seconds}
    )
    return Beat(cancel_requested=bool(rows[0]["cancel_requested"])) if rows else None


class Change(TypedDict, total=False):
    """What a finishing transition writes besides the state (each optional)."""

    result: Any  # the result, stored as JSON
    error: str  # last_error
    delay: float  # seconds until the job may be claimed again (a retry's backoff)
    refund: int  # attempts given back (a hand-back uses none)
    dead_lettered_by: str  # 'engine' or 'sweeper'
    detail: str  # the timeline event's text


@dataclass(frozen=True)
class Finished:
    """A fenced transition that took."""

    # The job ended (succeeded, dead-lettered, cancelled) and its tenant has parked jobs:
    # the slot it freed (its tenant's, or its key's) may release one now.
    has_parked: bool


async def finish(
    db: Database,
    job_id: uuid.UUID,
    token: uuid.UUID,
    *,
    to_state: JobState,
    from_state: JobState = JobState.RUNNING,
    **change: Unpack[Change],
) -> Finished | None:
    """Move the job out of its live lease; None when the token no longer holds it. An
    end is counted (store/endings.py), with the children a cancel cancelled."""
    result = change.get("result")
    params = {
        "id": job_id,
        "token": token,
        "to_state": to_state.value,
        "from_state": from_state.value,
        "result": Jsonb(result) if result is not None else None,
        "error": change.get("error"),
        "delay": change.get("delay", 0),
        "refund": change.get("refund", 0),
        "dead_lettered_by": change.get("dead_lettered_by"),
        "detail": change.get("detail"),
    }
    if to_state == JobState.CANCELLED:
        rows = await endings.cancelling(db, q("finish"), params)
    else:
        rows = await db.fetch(q("finish"), params)
        endings.count(rows)
    return Finished(has_parked=bool(rows[0]["has_parked"])) if rows else None


async def succeed_batch(
    db: Database, items: Sequence[tuple[uuid.UUID, uuid.UUID, Any]]
) -> dict[uuid.UUID, bool]:
    """running -> succeeded for each (job id, token, result); the tokens that held, each
    with whether its tenant has parked jobs (a release may send one now)."""
    rows = await db.fetch(
        q("succeed_batch"),
        {
            "ids": [job_id for job_id, _, _ in items],
            "tokens": [token for _, token, _ in items],
            "results": [Jsonb(r) if r is not None else None for _, _, r in items],
        },
    )
    endings.count(rows)
    return {row["token"]: bool(row["has_parked"]) for row in rows}


async def mark_stalled(db: Database, *, grace: float, limit: int) -> list[uuid.UUID]:
    """Leases expired more than ``grace`` seconds ago with no heartbeat: now stalled."""
    rows = await db.fetch(q("mark_stalled"), {"grace": grace, "limit": limit})
    return [row["id"] for row in rows]


async def touch_lost(db: Database, *, age: float, limit: int) -> list[Route]:
    """Waiting jobs unchanged for ``age`` seconds (their message may be gone), touched so
    the next sweep leaves them alone for as long again; where each one's message goes."""
    rows = await db.fetch(q("touch_lost"), {"age": age, "limit": limit})
    return [Route.of(row["id"], row["tenant"], row["priority"]) for row in rows]


async def release_parked(
    db: Database, tenants: Sequence[str], *, max_running: int
) -> tuple[list[OutboxRow], int]:
    """Unpark these tenants' parked jobs, highest priority and oldest first, one for each
    free slot (a keyed job only when its key has room), each with an outbox row (one
    statement): the rows to send, and how many of them are keyed jobs."""
    rows = await db.fetch(
        q("release_parked"), {"tenants": list(tenants), "max_running": max_running}
    )
    keyed = sum(1 for row in rows if row["flow_key"] is not None)
    return [OutboxRow.from_row(row) for row in rows], keyed


async def parked_tenants(db: Database, *, limit: int) -> list[str]:
    """Tenants with parked jobs (at most ``limit``)."""
    return [row["tenant"] for row in await db.fetch(q("parked_tenants"), {"limit": limit})]
