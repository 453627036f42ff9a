"""The outside party of the chaos run's approvals: it answers each demo.approval job's
callback ``approve`` at a random moment (at once, even before the job has suspended, or
seconds later), answers some a second time (that answer must be refused: a Conflict, as
the route's 409), and leaves some unanswered to time out and escalate. It answers
through app.services.callbacks, the code behind ``POST /v1/callbacks/{token}``, under
the same broker and database restarts as everything else, retrying until it knows.
What happened goes into ``Run.answers``, for the checker."""

from __future__ import annotations

import asyncio
import random
import time
import uuid
from typing import Any

from app import errors, store
from app.chaos.config import Config, Run
from app.chaos.workload import Item
from app.services import callbacks
from app.transport import Transport

KEY = "approve"  # demo.approval's callback
RETRY = 0.3
# A database restart under load may take this long; an answer still not through is
# reported (an approval the harness could not answer), never waited for forever.
GIVE_UP = 90.0
TRANSIENT = (errors.StoreError, errors.QueueError, TimeoutError, OSError)


async def answer_all(
    cfg: Config,
    run: Run,
    database: store.Database,
    queue: Transport,
    items: list[Item],
    submitted: asyncio.Event,
) -> None:
    """One task per approval the harness answers, each started once its job is acknowledged."""
    rng = random.Random(cfg.seed + 3)  # noqa: S311 - reproducible moments, not secrets
    todo = {i.ref: i for i in items if i.plan in ("answer", "answer twice")}
    started: list[asyncio.Task[None]] = []
    while todo:
        for ref in [r for r in todo if r in run.acked]:
            item = todo.pop(ref)
            # A third at once (often before the job suspends), the rest within 3 s.
            delay = 0.0 if rng.random() < 1 / 3 else rng.uniform(0.2, 3.0)
            again = rng.uniform(0.0, 2.0)
            started.append(
                asyncio.create_task(answer_one(run, database, queue, item, delay, again))
            )
        if submitted.is_set() and not any(r in run.acked for r in todo):
            break  # the rest were never acknowledged: nothing to answer
        await asyncio.sleep(0.2)
    await asyncio.gather(*started)


async def answer_one(
    run: Run,
    database: store.Database,
    queue: Transport,
    item: Item,
    delay: float,
    again: float,
) -> None:
    job_id = uuid.UUID(run.acked[item.ref])
    record: dict[str, Any] = {"job_id": str(job_id), "plan": item.plan}
    run.answers[item.ref] = record
    deadline = time.monotonic() + GIVE_UP
    # The callback exists once the job's first run has opened it.
    while time.monotonic() < deadline:
        try:
            if await store.waits.callback_of(database, job_id, KEY) is not None:
                break
        except TRANSIENT:
            pass
        await asyncio.sleep(RETRY)
    await asyncio.sleep(delay)
    result = {"approved_by": "chaos", "ref": item.ref}
    record["first"] = await _answer(database, queue, job_id, result, deadline, first=True)
    record["result"] = result
    if item.plan == "answer twice":
        await asyncio.sleep(again)
        second = {"approved_by": "chaos, again", "ref": item.ref}
        record["second"] = await _answer(database, queue, job_id, second, deadline, first=False)


async def _answer(
    database: store.Database,
    queue: Transport,
    job_id: uuid.UUID,
    result: dict[str, Any],
    deadline: float,
    *,
    first: bool,
) -> str:
    """``answered``, ``conflict``, ``not found`` or ``gave up``. A first answer that meets
    a Conflict after a failed try was the harness's own (the commit went through, the
    reply did not): ``answered``."""
    tried = False
    while time.monotonic() < deadline:
        try:
            token = await callbacks.token_for(database, job_id, KEY)
            await callbacks.answer(database, queue, token, result=result)
        except errors.Conflict:
            return "answered" if first and tried else "conflict"
        except errors.NotFound:
            return "not found"
        except TRANSIENT:
            tried = True
            await asyncio.sleep(RETRY)
            continue
        return "answered"
    return "gave up"
