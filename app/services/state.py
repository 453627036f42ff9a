"""The state jobs publish (``ctx.set_state``), as callers read it: every key of a job, one
key, or one key once it changed (a long poll woken by the stream hub). Scoped as every
job read: another tenant's job is NotFound."""

from __future__ import annotations

import uuid
from typing import Any

from app import errors, store
from app.services import jobs
from app.services.streams import Hub, wait_for
from app.states import FINAL_FOR_NOW
from app.store.state import StateValue


async def of_job(
    db: store.Database, job_id: uuid.UUID, *, scope: str | None
) -> list[dict[str, Any]]:
    """Every key the job published (by key): value, version, attempt, when it was set."""
    await jobs.find(db, job_id, scope=scope)
    return [s.to_dict() for s in await store.state.of_job(db, job_id)]


def _unset(job_id: uuid.UUID, key: str) -> errors.NotFound:
    return errors.NotFound(f"job {job_id} has published no state under key {key[:200]!r}")


async def one(
    db: store.Database,
    hub: Hub | None,
    job_id: uuid.UUID,
    key: str,
    *,
    scope: str | None,
    after_version: int | None = None,
    wait: float = 0.0,
) -> dict[str, Any]:
    """The job's ``key``. With ``after_version``, once its version is past that: waits up
    to ``wait`` seconds for the key to appear or change (not once the job is finished:
    nothing will change it), then answers what it holds (compare the version). An
    unset key is NotFound."""
    await jobs.find(db, job_id, scope=scope)

    async def look() -> tuple[StateValue | None, bool]:
        found = await store.state.key_of(db, job_id, key)
        if found is None:
            raise errors.NotFound(f"no job {job_id}")  # pruned meanwhile
        job_state, value = found
        if after_version is None or job_state in FINAL_FOR_NOW:
            return value, True
        return value, value is not None and value.version > after_version

    value, _ = await wait_for(hub, job_id, look, wait if after_version is not None else 0.0)
    if value is None:
        raise _unset(job_id, key)
    return value.to_dict()
