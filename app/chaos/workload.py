"""The chaos run's workload: the tickets (some tagged to fail) and the clients that
submit them through the API, each retried with its Idempotency-Key until a 202."""

from __future__ import annotations

import asyncio
import math
import random
import time
from typing import Any

import httpx

from app.chaos.config import Config, Run
from app.chaos.stack import ChaosStack

SUBJECTS = [
    ("Charged twice for my invoice", "My card was charged twice this month, please refund."),
    ("App crashes on login", "Since the update the app crashes with an error at sign in."),
    ("Password reset email never arrives", "I asked for a reset of my account password."),
    ("Please add dark mode", "It would be nice to have a dark theme. Feature request."),
    ("Site down, urgent", "Nothing loads since this morning: an outage? Please help asap."),
    ("Question about my plan", "Which plan fits a team of five?"),
]


def tickets(cfg: Config) -> tuple[list[dict[str, Any]], dict[str, str]]:
    """The payloads, and the tag each tagged ticket carries (deterministic by --seed)."""
    rng = random.Random(cfg.seed)  # noqa: S311 - reproducible test data, not secrets
    tagged = min(cfg.jobs // 2, math.ceil(cfg.tagged_rate * cfg.jobs)) if cfg.tagged_rate else 0
    picks = rng.sample(range(cfg.jobs), 2 * tagged)
    tags = {f"C-{i}": "[permanent]" for i in picks[:tagged]}
    # Fails as many calls as the attempt budget: dead-lettered, then succeeds once redriven.
    tags |= {f"C-{i}": f"[transient:{cfg.max_attempts}]" for i in picks[tagged:]}
    out = []
    for i in range(cfg.jobs):
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


async def submit_all(
    cfg: Config, stack: ChaosStack, run: Run, payloads: list[dict[str, Any]]
) -> None:
    """Concurrent clients; each job retried with its Idempotency-Key until a 202."""
    todo: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
    for p in payloads:
        todo.put_nowait(p)

    async def client_loop(client: httpx.AsyncClient) -> None:
        while not todo.empty():
            ticket = todo.get_nowait()
            body = {"kind": "support.triage", "payload": ticket, "max_attempts": cfg.max_attempts}
            headers = {"Idempotency-Key": f"chaos-{ticket['ticket_id']}"}
            deadline = time.monotonic() + 120
            while True:
                try:
                    resp = await client.post("/v1/jobs", json=body, headers=headers)
                except httpx.HTTPError:
                    resp = None
                if resp is not None and resp.status_code == 202:
                    run.acked[ticket["ticket_id"]] = resp.json()["id"]
                    break
                if resp is not None and 400 <= resp.status_code < 500:
                    run.rejected.append(f"{ticket['ticket_id']}: {resp.status_code} {resp.text}")
                    break
                if time.monotonic() > deadline:
                    run.rejected.append(f"{ticket['ticket_id']}: no 202 within 120 s")
                    break
                run.submit_retries += 1
                await asyncio.sleep(0.3)

    async with httpx.AsyncClient(
        base_url=stack.api_url, timeout=10, headers=stack.api_headers
    ) as client:
        await asyncio.gather(*(client_loop(client) for _ in range(cfg.clients)))
