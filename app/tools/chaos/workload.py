"""The chaos run's workload: the tickets (some tagged to fail), the waiting work mixed in
(naps, approvals the harness answers or leaves to time out, fan-outs), the agent runs,
and the clients
that submit them through the API, each retried with its Idempotency-Key until a 202."""

from __future__ import annotations

import asyncio
import dataclasses
import math
import random
import time
from typing import Any

import httpx

from app.demos import agent as demo_agent
from app.demos import revised
from app.tools.chaos.config import DEPLOY_AT, Config, Run
from app.tools.chaos.stack import ChaosStack

SUBJECTS = [
    ("Charged twice for my invoice", "My card was charged twice this month, please refund."),
    ("App crashes on login", "Since the update the app crashes with an error at sign in."),
    ("Password reset email never arrives", "I asked for a reset of my account password."),
    ("Please add dark mode", "It would be nice to have a dark theme. Feature request."),
    ("Site down, urgent", "Nothing loads since this morning: an outage? Please help asap."),
    ("Question about my plan", "Which plan fits a team of five?"),
]


TRIAGE = "support.triage"
# The waiting work, in turn: naps (one short, several in a row, one longer than the
# run's delay cap, so the sweeper sends its wake-up), approvals (answered once, answered
# twice, left to time out and escalate), fan-outs (children failing for good within
# what the rule tolerates). (kind, payload, plan); the plan tells the harness and the
# checker what should happen.
NAPS = [
    {"seconds": 1.0, "naps": 1},
    {"seconds": 0.5, "naps": 3},
    {"seconds": 4.0, "naps": 1},  # past TASKLEASE_MAX_MESSAGE_DELAY_SECONDS (stack.py)
]
ANSWERED_TIMEOUT = 120.0  # long enough for an answer to get through the faults
UNANSWERED_TIMEOUT = 3.0
APPROVALS = [
    ({"timeout_seconds": ANSWERED_TIMEOUT, "on_timeout": "escalate"}, "answer"),
    ({"timeout_seconds": ANSWERED_TIMEOUT, "on_timeout": "escalate"}, "answer twice"),
    ({"timeout_seconds": UNANSWERED_TIMEOUT, "on_timeout": "escalate"}, "time out"),
]
# Each rule tolerates one failure more than it plans: a child dead-lettered by the
# faults (its attempts used up by kills) must not fail its parent's gather.
FANOUTS = [
    {"children": 4, "at_least": 2, "fail": [1], "child_seconds": 0.5},
    {"children": 3, "at_least": 2, "fail": [], "child_seconds": 0.0},
    {"children": 5, "at_least": 2, "fail": [1, 3], "child_seconds": 1.0},
    {"children": 3, "tolerate": 1, "fail": [], "child_seconds": 0.5},  # all, tolerating 1
]
# Agent runs (demo.agent: Pydantic AI, demo.openai_agent: the OpenAI Agents SDK, against
# the fake model server): 4 model requests and 3 tool calls each, every one a step.
AGENT_QUESTIONS = [
    "Why does a lease expire?",
    "What does an effect record?",
    "When is a job dead-lettered?",
]
# Streamed answers (ctx.generate): a worker killed mid-answer leaves the next to continue.
WRITES = [
    {"prompt": "Explain leases in a paragraph", "words": 40},
    {"prompt": "Why record effects?", "words": 80},
]


@dataclasses.dataclass(frozen=True)
class Item:
    """One job to submit: its client-side id (the Idempotency-Key's tail), kind, payload,
    and for waiting work what the harness does with it (``answer``, ``answer twice``,
    ``time out``) or ``""``."""

    ref: str
    kind: str
    payload: dict[str, Any]
    plan: str = ""
    deadline_seconds: float | None = None


def waiting_work(cfg: Config, rng: random.Random) -> list[Item]:
    """``cfg.waiting`` of the jobs: naps, approvals, fan-outs and streamed answers in turn."""
    n = round(cfg.waiting * cfg.jobs)
    items = []
    for i in range(n):
        ref = f"W-{i}"
        which, variant = i % 4, (i // 4) % 4
        if which == 3:
            items.append(Item(ref, "demo.write", WRITES[variant % len(WRITES)]))
        elif which == 0:
            items.append(Item(ref, "demo.nap", NAPS[variant % len(NAPS)]))
        elif which == 1:
            payload, plan = APPROVALS[variant % len(APPROVALS)]
            items.append(Item(ref, "demo.approval", payload, plan))
        else:
            items.append(Item(ref, "demo.fanout", FANOUTS[variant]))
    rng.shuffle(items)
    return items


# Messages (demo.chat: each answered once and in order), deadlines that pass under the
# faults (a nap and a sleep that outlast them: ended waiting, queued or running), and
# published state (demo.publish). The refs name them for the harness and the checker.
CHAT = {"messages": 3, "work_seconds": 0.3}
DEADLINE_SECONDS = 3.0
DEADLINED = [
    ("demo.nap", {"seconds": 600.0, "naps": 1}),
    ("demo.sleep", {"seconds": 1.0, "steps": 600}),
]
PUBLISH = {"steps": 3, "seconds": 0.2}
CHAT_REF, DEADLINE_REF = "M-", "D-"


def talk_work(cfg: Config) -> list[Item]:
    """``cfg.chats`` chats, ``cfg.deadlines`` jobs past their deadline, ``cfg.publishes``
    publishers."""
    items = [Item(f"{CHAT_REF}{i}", "demo.chat", CHAT) for i in range(cfg.chats)]
    for i in range(cfg.deadlines):
        kind, payload = DEADLINED[i % len(DEADLINED)]
        items.append(Item(f"{DEADLINE_REF}{i}", kind, payload, deadline_seconds=DEADLINE_SECONDS))
    return items + [Item(f"P-{i}", "demo.publish", PUBLISH) for i in range(cfg.publishes)]


REVISED_REF = "R-"


def revisions(cfg: Config) -> tuple[list[Item], list[Item]]:
    """``cfg.revisions`` demo.revised jobs: (the first half, submitted first, each napping
    past the deploy of version 2 with time to spare (a restart before it delays it),
    and the rest, submitted last, napping a second: they mostly start on version 2)."""
    first = (cfg.revisions + 1) // 2
    naps = [cfg.fault_seconds * (DEPLOY_AT + 0.75 + 0.25 * i) for i in range(first)]
    naps += [1.0] * (cfg.revisions - first)
    items = [
        Item(f"{REVISED_REF}{i}", revised.KIND, {"nap_seconds": round(nap, 1)})
        for i, nap in enumerate(naps)
    ]
    return items[:first], items[first:]


def deadline_refs(items: list[Item]) -> list[str]:
    return [i.ref for i in items if i.deadline_seconds is not None]


def agent_work(cfg: Config) -> list[Item]:
    """``cfg.agents`` of the jobs: agent runs, the frameworks and the questions in turn."""
    n = round(cfg.agents * cfg.jobs)
    kinds = (demo_agent.KIND, demo_agent.OPENAI_KIND)
    return [
        Item(f"A-{i}", kinds[i % 2], {"question": AGENT_QUESTIONS[i % len(AGENT_QUESTIONS)]})
        for i in range(n)
    ]


def workload(cfg: Config) -> tuple[list[Item], dict[str, str]]:
    """The tickets, the waiting work and the agent runs, mixed (deterministic by --seed),
    and the tag each tagged ticket carries."""
    talk = talk_work(cfg)
    early, late = revisions(cfg)
    others = round(cfg.waiting * cfg.jobs) + round(cfg.agents * cfg.jobs) + len(talk)
    others += cfg.revisions + cfg.keyed_jobs  # keyed work: submitted by keyed.py
    payloads, tags = tickets(cfg, cfg.jobs - others)
    rng = random.Random(cfg.seed + 2)  # noqa: S311 - reproducible test data, not secrets
    waits = waiting_work(cfg, rng) + agent_work(cfg) + talk
    rng.shuffle(waits)
    items = [Item(p["ticket_id"], TRIAGE, p) for p in payloads]
    # Spread the waiting work through the submissions, so it meets every fault.
    spread = len(items)
    for k, item in enumerate(waits):
        items.insert((k * spread) // len(waits) + k, item)
    return early + items + late, tags


def tickets(cfg: Config, count: int | None = None) -> tuple[list[dict[str, Any]], dict[str, str]]:
    """The payloads, and the tag each tagged ticket carries (deterministic by --seed)."""
    rng = random.Random(cfg.seed)  # noqa: S311 - reproducible test data, not secrets
    jobs = cfg.jobs if count is None else count
    tagged = min(jobs // 2, math.ceil(cfg.tagged_rate * jobs)) if cfg.tagged_rate else 0
    picks = rng.sample(range(jobs), 2 * tagged)
    tags = {f"C-{i}": "[permanent]" for i in picks[:tagged]}
    # Fails as many calls as the attempt budget: dead-lettered, then succeeds once redriven.
    tags |= {f"C-{i}": f"[transient:{cfg.max_attempts}]" for i in picks[tagged:]}
    out = []
    for i in range(jobs):
        subject, body = SUBJECTS[rng.randrange(len(SUBJECTS))]
        tid = f"C-{i}"
        tag = tags.get(tid)
        out.append(
            {
                "ticket_id": tid,
                "subject": f"{tag} {subject}" if tag else subject,
                "body": body,
                "customer_email": f"c{i}@example.com",
            }
        )
    return out, tags


async def submit_all(cfg: Config, stack: ChaosStack, run: Run, items: list[Item]) -> None:
    """Concurrent clients; each job retried with its Idempotency-Key until a 202."""
    todo: asyncio.Queue[Item] = asyncio.Queue()
    for item in items:
        todo.put_nowait(item)

    async def client_loop(client: httpx.AsyncClient) -> None:
        while not todo.empty():
            await submit_one(cfg, run, client, todo.get_nowait())

    async with httpx.AsyncClient(
        base_url=stack.api_url, timeout=10, headers=stack.api_headers
    ) as client:
        await asyncio.gather(*(client_loop(client) for _ in range(cfg.clients)))


async def submit_one(cfg: Config, run: Run, client: httpx.AsyncClient, item: Item) -> None:
    """One job, retried with its Idempotency-Key until a 202 (a 4xx or 120 s: rejected)."""
    ref = item.ref
    body = {"kind": item.kind, "payload": item.payload, "max_attempts": cfg.max_attempts}
    if item.deadline_seconds is not None:
        body["deadline_seconds"] = item.deadline_seconds
    headers = {"Idempotency-Key": f"chaos-{ref}"}
    deadline = time.monotonic() + 120
    while True:
        try:
            resp = await client.post("/v1/jobs", json=body, headers=headers)
        except httpx.HTTPError:
            resp = None
        if resp is not None and resp.status_code == 202:
            run.acked[ref] = resp.json()["id"]
            return
        if resp is not None and 400 <= resp.status_code < 500:
            run.rejected.append(f"{ref}: {resp.status_code} {resp.text}")
            return
        if time.monotonic() > deadline:
            run.rejected.append(f"{ref}: no 202 within 120 s")
            return
        run.submit_retries += 1
        await asyncio.sleep(0.3)
