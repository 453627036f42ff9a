"""A kind whose effects are plain (not ``async def``) functions, as a newcomer writes
them (issue 30, item 1), for a real worker process to load through TASKLEASE_KINDS
(tests/e2e/test_plain_effects.py). Each side effect appends a line to the payload's file:
the test counts them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import BaseModel

from tasklease import JobContext, Usage, kind


class Note(BaseModel):
    path: str
    text: str


def write_file(path: str, line: str) -> dict[str, Any]:
    """A blocking side effect: one line more in the file."""
    with Path(path).open("a", encoding="utf-8") as f:
        f.write(line + "\n")
    return {"written": line}


async def shout(text: str) -> str:
    return text.upper()


@kind("test.plain_effects", timeout_seconds=30, max_attempts=2)
async def plain_effects(ctx: JobContext[None], p: Note) -> dict[str, Any]:
    written: dict[str, Any] = await ctx.effect("write", lambda: write_file(p.path, p.text))
    loud: str = await ctx.effect("shout", lambda: shout(p.text))

    def call_model() -> tuple[str, Usage]:
        write_file(p.path, "model")
        return loud + "!", Usage("plain-model", 1, 1)

    answer = await ctx.model_call("model", call_model)
    return {**written, "loud": loud, "answer": answer}
