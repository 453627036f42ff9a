"""The chaos run's agent jobs (demo.agent, demo.openai_agent: app/demos/agent.py), the
harness's side: what an uninterrupted run of each question gives, the fake model
server's request log, and a throttle of that server while the faults run. The checks
are per_agent's."""

from __future__ import annotations

import contextlib
import importlib.util
import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import httpx

from app import errors
from app.demos import agent as demo_agent
from app.demos.triage import deps_from
from app.demos.triage import settings as triage_settings
from app.kinds.testing import run_kind
from app.tools.chaos.workload import Item
from app.tools.fakemodel import serve_in_thread

# The agent model's next requests answered 429 when the faults start: a throttled agent
# run is retried holding no worker and using no attempt, and replays what it recorded.
THROTTLED_REQUESTS = 3


KINDS = {demo_agent.KIND: demo_agent.agent, demo_agent.OPENAI_KIND: demo_agent.openai_agent}


def require_frameworks() -> None:
    """The agent kinds import their frameworks at their first job: say up front (without
    importing them, which takes seconds) if an extra is missing."""
    for module, extra in (("pydantic_ai", "pydantic-ai"), ("agents", "openai-agents")):
        if importlib.util.find_spec(module) is None:
            raise errors.ConfigError(
                f"the chaos run's agent jobs need the {extra} extra ({module} is not "
                "installed): uv sync --all-extras, or run with --agents 0"
            )


async def uninterrupted(items: Iterable[Item]) -> dict[str, Any]:
    """Each agent job's ref to the result an uninterrupted run of its question gives: its
    kind run once per question, in memory, against a fake model server of this
    process's, its tools telling nobody. The fake model is deterministic, so this is what
    a run interrupted anywhere must end with too."""
    asked = [i for i in items if i.kind in KINDS]
    if not asked:
        return {}
    server = serve_in_thread()
    hook = deps_from(triage_settings.load())
    hook.webhook_url = None
    deps = demo_agent.AgentDeps(server.url, "fake-model", "fake-key", hook)
    found: dict[tuple[str, str], Any] = {}
    try:
        for item in asked:
            asks = (item.kind, str(item.payload["question"]))
            if asks not in found:
                run = await run_kind(KINDS[item.kind], item.payload, deps=deps)
                found[asks] = run.stored
    finally:
        await deps.aclose()
        server.stop()
    return {i.ref: found[(i.kind, str(i.payload["question"]))] for i in asked}


async def throttle(url: str, n: int = THROTTLED_REQUESTS) -> None:
    """The agent model answers its next ``n`` requests with a 429 (Retry-After: 1)."""
    if not url:
        return
    async with httpx.AsyncClient(timeout=10) as client:
        resp = await client.post(f"{url}/throttle", json={"next": n})
        resp.raise_for_status()


def requests_logged(log: Path) -> list[dict[str, Any]]:
    """The agent model's log: every request it answered (or refused with a 429)."""
    with contextlib.suppress(FileNotFoundError):
        return [json.loads(line) for line in log.read_text().splitlines() if line]
    return []
