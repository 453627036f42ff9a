"""The model behind support.triage: a small interface, a deterministic fake and an
OpenAI-compatible HTTP provider.

The fake is the default. It classifies by keywords, waits a configurable time,
and injects failures: by rate (``TASKLEASE_FAKE_MODEL_TRANSIENT_RATE``,
``..._PERMANENT_RATE``) or by a tag in the ticket's subject: ``[transient]``
fails the first call for an idempotency key, ``[transient:N]`` the first N,
``[permanent]`` every call. ``..._SLOW_RATE`` makes that share of calls take
``..._SLOW_MS`` instead (longer than a lease, to exercise the heartbeat). It throttles
like a provider's 429 (``Throttled``, with ``..._RETRY_AFTER_SECONDS``) at
``..._THROTTLE_RATE``, or by tag: ``[throttle:N]`` the first N calls for a key,
``[throttle]`` every call. Each call is appended to a JSON-lines log when
``TASKLEASE_FAKE_MODEL_LOG`` is set, so tests and the chaos report can count model
calls per effect across processes.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import hashlib
import json
import os
import re
from collections import Counter
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, Protocol

import httpx

from app import errors
from app.demos.triage import throttling, writing
from app.demos.triage.settings import TriageSettings
from app.kinds.generate import Usage

CATEGORIES = ("billing", "bug", "account", "feature_request", "other")
_KEYWORDS = {
    "billing": ("invoice", "charge", "refund", "payment", "billing", "price"),
    "bug": ("error", "crash", "broken", "bug", "fails", "exception"),
    "account": ("login", "password", "account", "sign in", "2fa"),
    "feature_request": ("feature", "would be nice", "please add", "request"),
}
_TAG = re.compile(r"\[(transient|permanent)(?::(\d+))?\]")
_THROTTLE_TAG = re.compile(r"\[throttle(?::(\d+))?\]")
# What a model call is estimated to answer, in tokens (its budget reservation; the
# reported usage settles it), and roughly how many characters a token is.
ANSWER_TOKENS_ESTIMATE = 256
CHARS_PER_TOKEN = 4


def estimate_tokens(*texts: str) -> int:
    """A call's tokens before it goes out: its prompt's, roughly, and an answer's."""
    return sum(len(t) for t in texts) // CHARS_PER_TOKEN + ANSWER_TOKENS_ESTIMATE


class TransientModelError(errors.JobError):
    """The model call failed; another attempt may succeed."""


class ModelProvider(Protocol):
    name: str

    def budget_name(self, op: str) -> str:
        """The "provider/model" a call of ``op`` ("triage", "generate") is budgeted under
        (TASKLEASE_MODEL_BUDGETS)."""
        ...

    async def triage(
        self, *, subject: str, body: str, idempotency_key: str
    ) -> tuple[dict[str, Any], Usage]: ...

    def generate(
        self, prompt: str, *, partial: str, idempotency_key: str, words: int = 60
    ) -> AsyncIterator[str | Usage]:
        """A streamed answer to ``prompt`` continuing ``partial``: pieces, then Usage.
        ``words``: how long an answer the fake writes (a real model ignores it)."""
        ...


class FakeProvider:
    """Deterministic: the same ticket gets the same answer."""

    name = "fake"

    def __init__(self, settings: TriageSettings) -> None:
        self.latency = settings.fake_model_latency_ms / 1000
        self.transient_rate = settings.fake_model_transient_rate
        self.permanent_rate = settings.fake_model_permanent_rate
        self.slow_rate = settings.fake_model_slow_rate
        self.slow = settings.fake_model_slow_ms / 1000
        self.log_path = Path(settings.fake_model_log) if settings.fake_model_log else None
        self.chunk_seconds = settings.fake_model_chunk_ms / 1000
        self.throttle_rate = settings.fake_model_throttle_rate
        self.retry_after = settings.fake_model_retry_after_seconds
        self._calls: Counter[str] = Counter()
        self._throttled: Counter[str] = Counter()

    def budget_name(self, op: str) -> str:
        return f"fake/{writing.FAKE_WRITER if op == 'generate' else 'fake-triage-1'}"

    def _prior_calls(self, key: str) -> tuple[int, int]:
        """This key's earlier calls: (all of them, those not throttled). The injected
        failures count the calls that were not throttled, so a throttle (which uses no
        attempt) does not change which attempt a [transient:N] tag fails."""
        if self.log_path is None:
            return self._calls[key], self._calls[key] - self._throttled[key]
        try:
            lines = self.log_path.read_text().splitlines()
        except FileNotFoundError:
            return 0, 0
        mine = [line for line in lines if f'"key":"{key}"' in line]
        return len(mine), sum(1 for line in mine if '"outcome":"throttled"' not in line)

    def _log(self, key: str, outcome: str, **more: Any) -> None:
        self._calls[key] += 1
        self._throttled[key] += outcome == "throttled"
        if self.log_path is None:
            return
        line = json.dumps(
            {
                "at": dt.datetime.now(dt.UTC).isoformat(),
                "key": key,
                "pid": os.getpid(),
                "outcome": outcome,
                **more,
            },
            separators=(",", ":"),
        )
        # One write() of one line in append mode: lines from several processes never interleave.
        fd = os.open(self.log_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, (line + "\n").encode())
        finally:
            os.close(fd)

    @staticmethod
    def _chance(key: str, call: int, salt: str) -> float:
        digest = hashlib.sha256(f"{salt}:{key}:{call}".encode()).digest()
        return int.from_bytes(digest[:8], "big") / 2**64

    def generate(
        self, prompt: str, *, partial: str, idempotency_key: str, words: int = 60
    ) -> AsyncIterator[str | Usage]:
        """Deterministic: ``words`` words that are a function of the prompt, a word a
        piece every TASKLEASE_FAKE_MODEL_CHUNK_MS, continuing after ``partial``; each call
        is logged with the partial's length. Throttled at the rate, as ``triage`` is."""
        if self.throttle_rate:
            every, _ = self._prior_calls(idempotency_key)
            self._throttle(idempotency_key, every, "", model=writing.FAKE_WRITER)
        self._log(idempotency_key, "stream", op="generate", partial=len(partial))
        return writing.fake_generate(
            prompt, words=words, partial=partial, chunk_seconds=self.chunk_seconds
        )

    async def triage(
        self, *, subject: str, body: str, idempotency_key: str
    ) -> tuple[dict[str, Any], Usage]:
        span = writing.model_span("fake", "fake-triage-1")
        usage = None
        try:
            answer = await self._triage(subject=subject, body=body, idempotency_key=idempotency_key)
            words = len(f"{subject} {body}".split())
            usage = Usage("fake-triage-1", words, len(answer["draft_reply"].split()))
            return answer, usage
        finally:
            writing.end_span(span, usage)

    def _throttle(self, key: str, call: int, subject: str, model: str = "fake-triage-1") -> None:
        """Answer like a provider's 429 (with Retry-After) by tag or at the rate."""
        tag = _THROTTLE_TAG.search(subject)
        tagged = tag is not None and (tag.group(1) is None or call < int(tag.group(1)))
        if tagged or self._chance(key, call, "throttle") < self.throttle_rate:
            self._log(key, "throttled")
            raise errors.Throttled(
                f"fake model throttled the call (429), retry after {self.retry_after} s",
                provider=self.name,
                model=model,
                status=429,
                delay=float(self.retry_after) if self.retry_after else None,
            )

    async def _triage(self, *, subject: str, body: str, idempotency_key: str) -> dict[str, Any]:
        every, call = self._prior_calls(idempotency_key)
        self._throttle(idempotency_key, every, subject)
        slow = self._chance(idempotency_key, call, "slow") < self.slow_rate
        delay = self.slow if slow else self.latency
        if delay:
            await asyncio.sleep(delay)
        tag = _TAG.search(subject)
        if tag and tag.group(1) == "permanent":
            self._log(idempotency_key, "permanent")
            raise errors.PermanentError("model refused the ticket (fake: [permanent] tag)")
        if tag and tag.group(1) == "transient" and call < int(tag.group(2) or 1):
            self._log(idempotency_key, "transient")
            raise TransientModelError("model call failed (fake: [transient] tag)")
        if self._chance(idempotency_key, call, "permanent") < self.permanent_rate:
            self._log(idempotency_key, "permanent")
            raise errors.PermanentError("model refused the ticket (fake: injected)")
        if self._chance(idempotency_key, call, "transient") < self.transient_rate:
            self._log(idempotency_key, "transient")
            raise TransientModelError("model call failed (fake: injected)")
        self._log(idempotency_key, "ok")
        return self.answer(subject, body)

    @staticmethod
    def answer(subject: str, body: str) -> dict[str, Any]:
        text = f"{subject}\n{body}".lower()
        category = next(
            (c for c, words in _KEYWORDS.items() if any(w in text for w in words)), "other"
        )
        urgent = any(w in text for w in ("urgent", "asap", "down", "outage"))
        return {
            "category": category,
            "priority": "high" if urgent else "normal",
            "draft_reply": (
                f'Hello, thank you for writing about "{subject.strip()[:80]}". '
                f"We have filed it as a {category.replace('_', ' ')} question"
                + (" and marked it urgent." if urgent else ".")
                + " A member of the team will follow up shortly."
            ),
            "model": "fake-triage-1",
        }


class OpenAICompatibleProvider:
    """Any server that speaks OpenAI's chat completions API."""

    name = "openai"

    def __init__(self, settings: TriageSettings) -> None:
        settings.need("openai_base_url")
        self.base_url = str(settings.openai_base_url).rstrip("/")
        self.model = settings.openai_model
        self.prefill = settings.openai_prefill
        self.api_key = settings.openai_api_key
        self.timeout = settings.model_timeout_seconds

    def budget_name(self, op: str) -> str:
        return f"{self.name}/{self.model}"

    def _headers(self, idempotency_key: str) -> dict[str, str]:
        headers = {"Idempotency-Key": idempotency_key}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        return headers

    def generate(
        self, prompt: str, *, partial: str, idempotency_key: str, words: int = 60
    ) -> AsyncIterator[str | Usage]:
        return writing.openai_generate(
            base_url=self.base_url,
            headers=self._headers(idempotency_key),
            timeout=self.timeout,
            model=self.model,
            prompt=prompt,
            partial=partial,
            prefill=self.prefill,
            transient=TransientModelError,
        )

    async def triage(
        self, *, subject: str, body: str, idempotency_key: str
    ) -> tuple[dict[str, Any], Usage]:
        span = writing.model_span("openai", self.model)
        usage = None
        try:
            answer, usage = await self._triage(subject, body, idempotency_key)
            return answer, usage
        finally:
            writing.end_span(span, usage)

    async def _triage(
        self, subject: str, body: str, idempotency_key: str
    ) -> tuple[dict[str, Any], Usage]:
        headers = self._headers(idempotency_key)
        request = {
            "model": self.model,
            "response_format": {"type": "json_object"},
            "messages": [
                {
                    "role": "system",
                    "content": (
                        "You triage customer support tickets. Answer with a JSON object with "
                        f"keys category (one of {', '.join(CATEGORIES)}), priority (high or "
                        "normal) and draft_reply (a short, polite reply to the customer)."
                    ),
                },
                {"role": "user", "content": f"Subject: {subject}\n\n{body}"},
            ],
        }
        try:
            async with httpx.AsyncClient(timeout=self.timeout) as client:
                resp = await client.post(
                    f"{self.base_url}/chat/completions", json=request, headers=headers
                )
        except httpx.HTTPError as exc:
            raise TransientModelError(f"model endpoint unreachable: {exc}") from exc
        throttling.check(resp.status_code, resp.headers, provider=self.name, model=self.model)
        if resp.status_code in (408, 409, 429) or resp.status_code >= 500:
            raise TransientModelError(f"model endpoint answered {resp.status_code}")
        if resp.status_code >= 400:
            raise errors.PermanentError(f"model endpoint refused the request: {resp.status_code}")
        try:
            reply = resp.json()
            content = reply["choices"][0]["message"]["content"]
            answer = json.loads(content)
            used = reply.get("usage") or {}
            usage = Usage(
                str(reply.get("model") or self.model),
                used.get("prompt_tokens"),
                used.get("completion_tokens"),
            )
        except (ValueError, KeyError, IndexError, TypeError) as exc:
            raise TransientModelError("model answer was not the JSON asked for") from exc
        if not isinstance(answer, dict) or "draft_reply" not in answer:
            raise TransientModelError("model answer has no draft_reply")
        answer.setdefault("model", self.model)
        return answer, usage


def build(settings: TriageSettings) -> ModelProvider:
    if settings.model_provider == "openai":
        return OpenAICompatibleProvider(settings)
    return FakeProvider(settings)
