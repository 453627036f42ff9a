"""The chaos run's keyed work (issue 35; checked by per_key.py): demo.converse messages,
several to each conversation at once (one run per conversation at a time: the others
wait behind the key), and demo.reindex edits in bursts per document (debounced 2 s: the
last of a burst runs). All but the last conversation go in under the faults; the last
once they and their recovery are over, so the hand-off from one job of a key to the next
is also measured where no fault excuses it.

The windows around each fault in which a wait on a free key is excused, and the bound
on such a wait otherwise, are set here from the stack's clocks."""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt

import httpx

from app.demos import flow as demo_flow
from app.tools.chaos.config import Config, Run
from app.tools.chaos.per_key import Outage
from app.tools.chaos.stack import LOST_MESSAGE_SECONDS, SWEEP_INTERVAL_SECONDS, ChaosStack
from app.tools.chaos.workload import Item, submit_one

CONVERSE_REF, REINDEX_REF = "K-", "B-"
REPLY_SECONDS = 0.3  # each reply holds its conversation this long at least
PAUSE_EVERY = 2  # every second message of a conversation also waits on a timer, holding its key
EDIT_GAP = 0.15  # between the edits of a burst: well within the 2 s window
BURST_GAP = 3.0  # between a document's two bursts: past the window, two bursts
# A key freed is taken by the next job within a sweep (the backstop release) and a
# receive; the margin covers a busy two-core machine.
KEY_BOUND = SWEEP_INTERVAL_SECONDS + 4.0


def conversation(cfg: Config, c: int) -> list[Item]:
    return [
        Item(
            f"{CONVERSE_REF}{c}-{m}",
            demo_flow.converse.name,
            {
                "conversation": f"chaos-c{c}",
                "text": f"message {m}",
                "seconds": REPLY_SECONDS,
                "wait_seconds": 0.5 if m % PAUSE_EVERY else 0.0,
            },
        )
        for m in range(cfg.messages)
    ]


def bursts(cfg: Config, d: int) -> list[list[Item]]:
    return [
        [
            Item(
                f"{REINDEX_REF}{d}-{b}-{e}",
                demo_flow.reindex.name,
                {"document": f"chaos-d{d}", "revision": b * cfg.edits + e},
            )
            for e in range(cfg.edits)
        ]
        for b in range(2)
    ]


def keyed_refs(cfg: Config) -> list[str]:
    items = [i for c in range(cfg.conversations) for i in conversation(cfg, c)]
    items += [i for d in range(cfg.documents) for b in bursts(cfg, d) for i in b]
    return [i.ref for i in items]


async def submit_under_faults(cfg: Config, stack: ChaosStack, run: Run) -> None:
    """The conversations but the last, spread over the fault phase, each one's messages
    at once; each document's two bursts, edit after edit, from a fifth of the way in."""
    async with httpx.AsyncClient(
        base_url=stack.api_url, timeout=10, headers=stack.api_headers
    ) as client:

        async def talk(c: int, after: float) -> None:
            await asyncio.sleep(after)
            await asyncio.gather(*(submit_one(cfg, run, client, i) for i in conversation(cfg, c)))

        async def edit(d: int, after: float) -> None:
            await asyncio.sleep(after)
            for n, burst in enumerate(bursts(cfg, d)):
                if n:
                    await asyncio.sleep(BURST_GAP)
                for item in burst:
                    await submit_one(cfg, run, client, item)
                    await asyncio.sleep(EDIT_GAP)

        faulted = max(0, cfg.conversations - 1)
        span = 0.7 * cfg.fault_seconds
        await asyncio.gather(
            *(talk(c, span * c / max(1, faulted)) for c in range(faulted)),
            *(edit(d, cfg.fault_seconds * (0.2 + 0.3 * d)) for d in range(cfg.documents)),
        )


async def submit_after_faults(cfg: Config, stack: ChaosStack, run: Run) -> None:
    """The last conversation's messages at once, when no fault's window is open."""
    if cfg.conversations < 1:
        return
    quiet = max((end for _, end in excused(cfg, run)), default=None)
    if quiet is not None:
        with contextlib.suppress(ValueError):
            await asyncio.sleep(
                min(60.0, max(0.0, (quiet - dt.datetime.now(dt.UTC)).total_seconds()))
            )
    run.note("the faults' windows closed: the last conversation's messages, at once")
    async with httpx.AsyncClient(
        base_url=stack.api_url, timeout=10, headers=stack.api_headers
    ) as client:
        items = conversation(cfg, cfg.conversations - 1)
        await asyncio.gather(*(submit_one(cfg, run, client, i) for i in items))


def excused(cfg: Config, run: Run) -> list[Outage]:
    """The windows in which a wait on a free key is excused: from a second before each
    kill (its worker may hold the next job's message, unclaimed) to the visibility
    timeout and two sweeps after it; around each restart and deploy, until a lost
    message is sent again and taken."""
    lead = dt.timedelta(seconds=1)
    after_kill = dt.timedelta(seconds=cfg.visibility + 2 * SWEEP_INTERVAL_SECONDS + 2)
    after_restart = dt.timedelta(
        seconds=cfg.visibility + LOST_MESSAGE_SECONDS + 2 * SWEEP_INTERVAL_SECONDS + 3
    )
    windows = []
    for kill in run.kills:
        at = dt.datetime.fromisoformat(kill["at"])
        windows.append((at - lead, at + after_kill))
    for out in run.outages:
        start, end = dt.datetime.fromisoformat(out["from"]), dt.datetime.fromisoformat(out["to"])
        windows.append((start - lead, end + after_restart))
    return windows
