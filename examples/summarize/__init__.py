"""examples.summarize: a job kind written outside tasklease.

Start it with ``TASKLEASE_KINDS=examples.summarize`` (and this folder's parent on
PYTHONPATH). It summarizes a document (the first sentences, by their order) in one
effect and posts the summary to ``SUMMARIZE_WEBHOOK_URL``, if set, in a second, so a
crash between them does not post twice from a fresh summary.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass

import httpx
from pydantic import BaseModel, ConfigDict, Field

from tasklease import JobContext, PermanentError, Retry, Settings, kind

_SENTENCE_END = re.compile(r"(?<=[.!?])\s+")


class Document(BaseModel):
    model_config = ConfigDict(extra="forbid")

    doc_id: str = Field(min_length=1, max_length=200)
    text: str = Field(min_length=1, max_length=200_000)
    max_sentences: int = Field(2, ge=1, le=20)


class Summary(BaseModel):
    doc_id: str
    summary: str
    sentences: int
    notified: bool


@dataclass
class SummarizeDeps:
    """Built once per worker process; closed when the worker stops."""

    http: httpx.AsyncClient
    webhook_url: str | None

    async def aclose(self) -> None:
        await self.http.aclose()


def build_deps(settings: Settings) -> SummarizeDeps:
    # The example's own setting, beside tasklease's: a kind reads what it needs.
    return SummarizeDeps(
        http=httpx.AsyncClient(timeout=10.0),
        webhook_url=os.environ.get("SUMMARIZE_WEBHOOK_URL") or None,
    )


def first_sentences(text: str, n: int) -> list[str]:
    return [s for s in _SENTENCE_END.split(text.strip()) if s][:n]


@kind("examples.summarize", timeout_seconds=60, max_attempts=4, deps=build_deps)
async def summarize(ctx: JobContext[SummarizeDeps], doc: Document) -> Summary:
    """Summarize a document and post the summary to a webhook."""

    async def extract() -> list[str]:
        return first_sentences(doc.text, doc.max_sentences)

    sentences: list[str] = await ctx.effect("summarize", extract)
    summary = " ".join(sentences)

    async def notify() -> bool:
        url = ctx.deps.webhook_url
        if url is None:
            return False
        body = {"job_id": str(ctx.job_id), "doc_id": doc.doc_id, "summary": summary}
        headers = {"Idempotency-Key": ctx.idempotency_key("notify")}
        try:
            resp = await ctx.deps.http.post(url, json=body, headers=headers)
        except httpx.HTTPError as exc:
            raise Retry(f"webhook unreachable: {type(exc).__name__}", delay=2) from exc
        if resp.status_code >= 500 or resp.status_code == 429:
            raise Retry(f"webhook answered {resp.status_code}", delay=2)
        if resp.status_code >= 400:
            raise PermanentError(f"webhook refused the summary: {resp.status_code}")
        return True

    notified: bool = await ctx.effect("notify", notify)
    ctx.log.info("summarized")
    return Summary(doc_id=doc.doc_id, summary=summary, sentences=len(sentences), notified=notified)
