"""State a job publishes (``ctx.set_state``): the latest JSON value per key, written
fenced by the lease token (a change also goes on the job's stream as a 'state' row), and
the reads behind ``GET /v1/jobs/{id}/state``. Migration 0023 says what a version is."""

from __future__ import annotations

import datetime as dt
import uuid
from dataclasses import dataclass
from typing import Any

from psycopg.types.json import Jsonb

from app.store.pool import Database, q
from app.store.records import Row


@dataclass(frozen=True, slots=True)
class StateValue:
    key: str
    value: Any
    version: int
    attempt: int
    updated_at: dt.datetime

    @classmethod
    def from_row(cls, row: Row) -> StateValue:
        return cls(row["key"], row["value"], row["version"], row["attempt"], row["updated_at"])

    def to_dict(self) -> dict[str, Any]:
        return {
            "key": self.key,
            "value": self.value,
            "version": self.version,
            "attempt": self.attempt,
            "updated_at": self.updated_at,
        }


@dataclass(frozen=True, slots=True)
class Published:
    """What a write did: ``fenced`` (the lease let it write), ``cancelled`` (the job's
    cancel refused it), ``room`` (False: a new key past the job's keys), the key's
    ``version`` after it, and whether it ``changed`` the value."""

    fenced: bool
    cancelled: bool
    room: bool
    version: int | None
    changed: bool


async def publish(
    db: Database, job_id: uuid.UUID, token: uuid.UUID, key: str, value: Any, *, max_keys: int
) -> Published:
    row = await db.fetch_one(
        q("set_state"),
        {"id": job_id, "token": token, "key": key, "value": Jsonb(value), "max_keys": max_keys},
    )
    assert row is not None  # one row, always
    return Published(
        fenced=bool(row["fenced"]),
        cancelled=bool(row["cancelled"]),
        room=bool(row["room"]),
        version=row["version"],
        changed=bool(row["changed"]),
    )


async def of_job(db: Database, job_id: uuid.UUID) -> list[StateValue]:
    """Every key the job published, by key."""
    return [StateValue.from_row(r) for r in await db.fetch(q("state_of_job"), {"job": job_id})]


async def key_of(db: Database, job_id: uuid.UUID, key: str) -> tuple[str, StateValue | None] | None:
    """The job's state and its ``key`` (None: unset); None when there is no such job."""
    row = await db.fetch_one(q("state_key"), {"job": job_id, "key": key})
    if row is None:
        return None
    return row["job_state"], None if row["key"] is None else StateValue.from_row(row)
