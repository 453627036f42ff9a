"""The witnesses of issue 32's work after the last drain, for per_message.py: each chat
job's stored messages (with the receive that read each), the API's view of the jobs
given a deadline (dead_lettered_by) and of the publishers (their published state), and
the jobs still past their deadline unfinished."""

from __future__ import annotations

import asyncio
import time
import uuid
from typing import Any

import httpx

from app import store
from app.store import deadlines
from app.store.pool import Database
from app.tools.chaos.config import Run
from app.tools.chaos.stack import WAKE_GRACE_SECONDS, ChaosStack
from app.tools.chaos.workload import CHAT_REF, Item, deadline_refs

# A job past its deadline by more than this once drained is a violation: the sweeper's
# pass and a lost wake-up's re-send, as for a stuck wait (run.py's grace).
DEADLINE_GRACE = 2 * WAKE_GRACE_SECONDS


async def talk_facts(
    database: Database, stack: ChaosStack, run: Run, items: list[Item]
) -> dict[str, Any]:
    chats = [run.acked[i.ref] for i in items if i.ref.startswith(CHAT_REF) and i.ref in run.acked]
    messages = {
        job_id: [
            {"id": m.id, "topic": m.topic, "body": m.body, "consumed_by": m.consumed_by}
            for m in await store.messages.of_job(database, uuid.UUID(job_id), limit=200)
        ]
        for job_id in chats
    }
    viewed = deadline_refs(items) + [i.ref for i in items if i.kind == "demo.publish"]
    views: dict[str, dict[str, Any]] = {}
    async with httpx.AsyncClient(
        base_url=stack.api_url, timeout=30, headers=stack.api_headers
    ) as api:
        for ref in viewed:
            if ref not in run.acked:
                continue
            job_id = run.acked[ref]
            job = (await api.get(f"/v1/jobs/{job_id}")).raise_for_status().json()
            state = (await api.get(f"/v1/jobs/{job_id}/state")).raise_for_status().json()
            views[job_id] = {**job, "published": state["items"]}
    return {"messages": messages, "views": views, "past_deadline": await past_deadline(database)}


async def past_deadline(database: Database, wait: float = DEADLINE_GRACE) -> list[list[str]]:
    """The jobs past their deadline unfinished by more than the grace, once none are or
    ``wait`` seconds have passed: (id, state, deadline)."""
    end = time.monotonic() + wait
    past = await deadlines.past(database, grace=DEADLINE_GRACE)
    while past and time.monotonic() < end:
        await asyncio.sleep(0.5)
        past = await deadlines.past(database, grace=DEADLINE_GRACE)
    return [[str(i), s, d.isoformat()] for i, s, d in past]
