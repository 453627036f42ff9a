"""The people who talk to the chaos run's demo.chat jobs: each job is sent its messages
(``POST /v1/jobs/{id}/messages`` on the run's API, each with its own Idempotency-Key,
retried through the restarts until a 201) at random moments: half its first message at
once, often before the job has run, the other half once the job is seen waiting on it,
the rest while it answers the one before or waits again. One message of each job is sent
a second time with the same key: the answer must name the same message. Once the job has
succeeded, one more message must be refused (409).

What each met goes into ``Run.sent`` (ref -> job id, the message ids answered in order,
the repeated keys' pairs of ids, the late message's fate), for the checker
(per_message.py)."""

from __future__ import annotations

import asyncio
import random
from typing import Any

import httpx

from app.states import JobState
from app.tools.chaos.answers import RETRY, pause
from app.tools.chaos.config import Config, Run
from app.tools.chaos.workload import CHAT_REF, Item

# A message not answered 201 by then is given up (the checker sees the job unanswered).
SEND_WITHIN = 120.0


async def send_all(
    cfg: Config,
    run: Run,
    api_url: str,
    headers: dict[str, str],
    items: list[Item],
    submitted: asyncio.Event,
    all_sent: asyncio.Event,
    over: asyncio.Event,
) -> None:
    """One task per chat job, started once it is acknowledged; ``all_sent`` is set once
    every message (not the late ones) has its answer: the drain waits for it, as a chat
    job waiting for a message not sent yet is not stuck. Ends with ``over``."""
    rng = random.Random(cfg.seed + 4)  # noqa: S311 - reproducible moments, not secrets
    todo = {i.ref: i for i in items if i.ref.startswith(CHAT_REF)}
    tasks: list[asyncio.Task[None]] = []
    ready: list[asyncio.Event] = []
    async with httpx.AsyncClient(base_url=api_url, timeout=10, headers=headers) as api:
        while todo:
            for ref in [r for r in todo if r in run.acked]:
                item = todo.pop(ref)
                done = asyncio.Event()
                ready.append(done)
                moments = (rng.random() < 0.5, [rng.uniform(0.0, 1.5) for _ in range(3)])
                tasks.append(asyncio.create_task(talk(run, api, item, moments, done, over)))
            if submitted.is_set() and not any(r in run.acked for r in todo):
                break  # the rest were never acknowledged
            await asyncio.sleep(0.2)
        for done in ready:
            await done.wait()
        all_sent.set()
        await asyncio.gather(*tasks)


async def talk(
    run: Run,
    api: httpx.AsyncClient,
    item: Item,
    moments: tuple[bool, list[float]],
    done: asyncio.Event,
    over: asyncio.Event,
) -> None:
    job_id = run.acked[item.ref]
    record: dict[str, Any] = {"job_id": job_id, "ids": [], "repeats": [], "late": "not tried"}
    run.sent[item.ref] = record
    at_once, pauses = moments
    try:
        if not at_once:
            await until(api, job_id, {JobState.WAITING}, over, within=SEND_WITHIN)
        for n in range(int(item.payload["messages"])):
            if n:
                await pause(over, pauses[n % len(pauses)])
            key = f"chaos-{item.ref}-{n}"
            first = await send(api, job_id, n, key)
            if first is None:
                return
            record["ids"].append(first)
            if n == 1:  # the same message again, as a client whose answer was lost
                again = await send(api, job_id, n, key)
                record["repeats"].append([first, again])
    finally:
        done.set()
    # A job dead-lettered (its attempts used up by kills) is only redriven after the
    # drain, when the late message is no longer sent: left untried.
    ended = {JobState.SUCCEEDED, JobState.DEAD_LETTERED, JobState.CANCELLED}
    if await until(api, job_id, ended, over) == JobState.SUCCEEDED:
        status = await send_status(api, job_id, -1, f"chaos-{item.ref}-late")
        record["late"] = {409: "refused", 201: "stored"}.get(status or 0, f"answered {status}")


async def until(
    api: httpx.AsyncClient,
    job_id: str,
    states: set[JobState],
    over: asyncio.Event,
    within: float | None = None,
) -> str | None:
    """Poll the job until it is in one of ``states`` (which), or ``over`` or ``within``
    seconds pass (None)."""
    loop = asyncio.get_running_loop()
    end = None if within is None else loop.time() + within
    while end is None or loop.time() < end:
        try:
            resp = await api.get(f"/v1/jobs/{job_id}")
            state = resp.json()["state"] if resp.status_code == 200 else None
            if state in states:
                return str(state)
        except httpx.HTTPError:
            pass
        if await pause(over, RETRY):
            return None
    return None


async def send(api: httpx.AsyncClient, job_id: str, n: int, key: str) -> int | None:
    """Message ``n``, retried with its key until a 201: the id it was stored as."""
    loop = asyncio.get_running_loop()
    end = loop.time() + SEND_WITHIN
    while loop.time() < end:
        with_id = await _post(api, job_id, n, key)
        if with_id is not None and with_id[0] == 201:
            return int(with_id[1]["id"])
        if with_id is not None and 400 <= with_id[0] < 500:
            return None
        await asyncio.sleep(RETRY)
    return None


async def send_status(api: httpx.AsyncClient, job_id: str, n: int, key: str) -> int | None:
    """The status a message meets once the API answers (5xx and no answer: retried)."""
    for _ in range(int(SEND_WITHIN / RETRY)):
        answer = await _post(api, job_id, n, key)
        if answer is not None and answer[0] < 500:
            return answer[0]
        await asyncio.sleep(RETRY)
    return None


async def _post(
    api: httpx.AsyncClient, job_id: str, n: int, key: str
) -> tuple[int, dict[str, Any]] | None:
    try:
        resp = await api.post(
            f"/v1/jobs/{job_id}/messages",
            json={"topic": "user", "body": {"n": n}},
            headers={"Idempotency-Key": key},
        )
    except httpx.HTTPError:
        return None
    return resp.status_code, (resp.json() if resp.status_code == 201 else {})
