"""The outside party of the chaos run's approvals: it answers each demo.approval job's
callback ``approve`` at a random moment (at once, even before the job has suspended, or
seconds later), answers some a second time (that answer must be refused: a Conflict, as
the route's 409), and leaves some unanswered to time out and escalate. It answers over
HTTP, ``POST /v1/callbacks/{token}`` on the run's API with no API key (the token, derived
as an operator's CLI derives it, is the credential), under the same broker and database
restarts as everything else, retrying until it knows.

It never gives up while the run is live: an approval submitted late in a burst waits
behind the whole backlog (the tenant's running cap lets a few jobs run at once) before
its first run opens the callback, which on a loaded machine took longer than the fixed
90 s the harness used to allow from the acknowledgement (issue 30, item 16). Giving up
there failed the gate for nothing, and doubled the run: the approval then waited out its
whole callback timeout (workload.ANSWERED_TIMEOUT) before escalating. It stops only when
``over`` is set: the run's drain has ended (drained, or past its own deadline).
What happened goes into ``Run.answers``, for the checker."""

from __future__ import annotations

import asyncio
import contextlib
import random
import uuid
from typing import Any

import httpx

from app import errors, store
from app.services import callbacks
from app.tools.chaos.config import Config, Run
from app.tools.chaos.workload import Item

KEY = "approve"  # demo.approval's callback
RETRY = 0.3
TRANSIENT = (errors.StoreError, errors.QueueError, TimeoutError, OSError)


async def answer_all(
    cfg: Config,
    run: Run,
    database: store.Database,
    api_url: str,
    items: list[Item],
    submitted: asyncio.Event,
    over: asyncio.Event,
) -> None:
    """One task per approval the harness answers, each started once its job is
    acknowledged; every one keeps trying until it knows, or until ``over``."""
    rng = random.Random(cfg.seed + 3)  # noqa: S311 - reproducible moments, not secrets
    todo = {i.ref: i for i in items if i.plan in ("answer", "answer twice")}
    started: list[asyncio.Task[None]] = []
    async with httpx.AsyncClient(base_url=api_url, timeout=10) as api:
        await _answer_each(rng, run, database, api, todo, submitted, started, over)
        await asyncio.gather(*started)


async def _answer_each(
    rng: random.Random,
    run: Run,
    database: store.Database,
    api: httpx.AsyncClient,
    todo: dict[str, Item],
    submitted: asyncio.Event,
    started: list[asyncio.Task[None]],
    over: asyncio.Event,
) -> None:
    while todo:
        for ref in [r for r in todo if r in run.acked]:
            item = todo.pop(ref)
            # A third at once (often before the job suspends), the rest within 3 s.
            delay = 0.0 if rng.random() < 1 / 3 else rng.uniform(0.2, 3.0)
            again = rng.uniform(0.0, 2.0)
            started.append(
                asyncio.create_task(answer_one(run, database, api, item, delay, again, over))
            )
        if submitted.is_set() and not any(r in run.acked for r in todo):
            break  # the rest were never acknowledged: nothing to answer
        await asyncio.sleep(0.2)


async def pause(over: asyncio.Event, seconds: float) -> bool:
    """Sleep ``seconds``, or less if the run ends meanwhile; True if it has ended."""
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(over.wait(), seconds)
    return over.is_set()


async def answer_one(
    run: Run,
    database: store.Database,
    api: httpx.AsyncClient,
    item: Item,
    delay: float,
    again: float,
    over: asyncio.Event,
) -> None:
    job_id = uuid.UUID(run.acked[item.ref])
    record: dict[str, Any] = {"job_id": str(job_id), "plan": item.plan, "since": run.elapsed()}
    run.answers[item.ref] = record
    # The callback exists once the job's first run has opened it: after the backlog
    # ahead of it, however long that takes while the run goes on.
    while True:
        try:
            if await store.waits.callback_of(database, job_id, KEY) is not None:
                record["opened"] = run.elapsed()
                break
        except TRANSIENT:
            pass
        if await pause(over, RETRY):
            record["first"] = "gave up"  # the run ended before the job opened its callback
            record["why"] = "the run ended before its job opened the callback"
            return
    await pause(over, delay)
    result = {"approved_by": "chaos", "ref": item.ref}
    record["first"] = await _answer(database, api, job_id, result, over, first=True)
    record["answered"] = run.elapsed()
    record["result"] = result
    if item.plan == "answer twice" and record["first"] == "answered":
        await pause(over, again)
        second = {"approved_by": "chaos, again", "ref": item.ref}
        record["second"] = await _answer(database, api, job_id, second, over, first=False)


async def _answer(
    database: store.Database,
    api: httpx.AsyncClient,
    job_id: uuid.UUID,
    result: dict[str, Any],
    over: asyncio.Event,
    *,
    first: bool,
) -> str:
    """``answered``, ``conflict``, ``not found`` or ``gave up`` (only once the run has
    ended, and never before one try). A first answer that meets a 409 after a failed try
    was the harness's own (the commit went through, the reply did not): ``answered``."""
    tried = False
    while True:
        try:
            token = await callbacks.token_for(database, job_id, KEY)
            resp = await api.post(f"/v1/callbacks/{token}", json={"result": result})
        except (*TRANSIENT, httpx.HTTPError):
            resp = None
        if resp is not None and resp.status_code == 200:
            return "answered"
        if resp is not None and resp.status_code == 409:
            return "answered" if first and tried else "conflict"
        if resp is not None and resp.status_code == 404:
            return "not found"
        tried = True  # the database or the API is restarting: try again
        if await pause(over, RETRY):
            return "gave up"
