"""greet: a first job kind. It imports tasklease and pydantic, nothing of tasklease's
internals, and lives in a folder of its own (TASKLEASE_KINDS=greet finds it)."""

from __future__ import annotations

import asyncio
import os
import tempfile
from pathlib import Path

from pydantic import BaseModel, Field

from tasklease import JobContext, PermanentError, kind

# Where the "outside system" writes what it received: one line per delivery.
OUTBOX = Path(os.environ.get("GREET_OUTBOX", Path(tempfile.gettempdir()) / "greetings.txt"))


class Greeting(BaseModel):  # the payload: checked when the job is submitted (422 if bad)
    name: str = Field(min_length=1, max_length=100)


class Greeted(BaseModel):  # the result: checked, then stored as JSON
    message: str
    delivery: str


def append(line: str) -> None:
    with OUTBOX.open("a") as out:
        out.write(line)


@kind("tutorial.greet", timeout_seconds=60, max_attempts=3)
async def greet(ctx: JobContext[None], p: Greeting) -> Greeted:
    """Compose a greeting and deliver it, once."""

    async def compose() -> str:
        if p.name.lower() == "nobody":
            raise PermanentError("nobody to greet")  # dead-lettered at once, no retry
        return f"Hello, {p.name}!"

    message: str = await ctx.effect("compose", compose)

    async def deliver() -> str:
        key = ctx.idempotency_key("deliver")  # f"{job_id}:deliver", the same on every attempt
        # The outside call: a real system would take the key and deduplicate on it.
        await asyncio.to_thread(append, f"{key} {message}\n")
        return key

    delivery: str = await ctx.effect("deliver", deliver)
    return Greeted(message=message, delivery=delivery)
