"""After a chaos run's drain: the transient dead letters redriven, the pruned history
checked, the dead letters' causes counted and the witnesses gathered for the checker."""

from __future__ import annotations

import asyncio
import json
import time
from collections import Counter
from typing import Any

import httpx

from app import transport
from app.store import audit
from app.store.pool import Database
from app.tools.chaos import agents
from app.tools.chaos.config import Run
from app.tools.chaos.per_kind import cause
from app.tools.chaos.stack import ChaosStack
from app.tools.chaos.workload import Item, deadline_refs


async def pruned_history(database: Database, seeded: int, wait: float = 60) -> dict[str, Any]:
    """Wait for the sweeper to prune the seeded history; what it left, what it left
    partial (must be none: a batch is one statement), and whether the maintained counts
    by state equal a scan."""
    deadline = time.monotonic() + wait
    left, partial = await audit.history(database)
    while left and time.monotonic() < deadline:
        await asyncio.sleep(1)
        left, partial = await audit.history(database)
    mismatch = await audit.counts_mismatch(database)
    problems = [f"{left} history jobs not pruned within {wait:.0f} s"] if left else []
    problems += [f"{partial} history jobs pruned in part"] if partial else []
    problems += [f"counts by state differ from a scan: {m}" for m in mismatch]
    return {"seeded": seeded, "left": left, "partial": partial, "problems": problems}


def deadlined(run: Run, items: list[Item]) -> set[str]:
    """The jobs given a deadline they cannot meet: their end is no transient dead letter."""
    return {run.acked[r] for r in deadline_refs(items) if r in run.acked}


async def redrive_transient(
    stack: ChaosStack, database: Database, skip: set[str] | None = None
) -> list[str]:
    """The dead letters whose cause was transient (not those in ``skip``), back through
    app.redrive (the DLQ walk: the dead letters are moved, the attempt budgets restart)."""
    from app.services import redrive

    assert stack.urls is not None
    ids = [
        i for i in await audit.transient_dead_letter_ids(database) if str(i) not in (skip or set())
    ]
    if not ids:
        return []
    settings = stack.settings()
    async with transport.connect(settings) as queue:
        report = await redrive.redrive(settings, database, queue, job_ids=ids)
    return [str(r["id"]) for r in report.selected]


async def dead_letter_causes(database: Database) -> dict[str, int]:
    return dict(Counter(cause(e) for e in await audit.dead_letter_errors(database)))


async def gather_facts(database: Database, stack: ChaosStack) -> dict[str, Any]:
    """The witnesses: the store's rows, the fake model's call log, the webhook's deliveries."""
    facts = await audit.witnesses(database)
    log = stack.dir / "model-calls.jsonl"
    calls = [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []
    async with httpx.AsyncClient(timeout=30) as client:
        resp = await client.get(f"{stack.hook_url}/deliveries")
        deliveries = resp.json()["deliveries"]
    requests = agents.requests_logged(stack.agent_model_log)
    return {**facts, "model_calls": calls, "deliveries": deliveries, "agent_requests": requests}
