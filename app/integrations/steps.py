"""What the agent frameworks' integrations share, with no framework imported: the steps'
keys, the model steps' text on the job's stream and the reading of an approval's answer."""

from __future__ import annotations

import contextlib
import hashlib
import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from app import errors
from app.kinds.context import MAX_EFFECT_KEY, JobContext
from app.kinds.generate import ChunkStream
from app.storable import unstorable

Item = TypeVar("Item")

ANSWER = 'true, false or {"approved": true|false, "message": "why (on a denial)"}'
# A tool call's arguments shown with its approval: longer ones are cut (a callback's
# details are bounded, MAX_DETAILS_BYTES; whoever decides needs the gist, the run keeps
# the whole).
ARGS_SHOWN_CHARS = 3000


def step_key(*parts: str) -> str:
    """``parts`` joined with ':' as an effect key; one too long for the effects table keeps
    its head and ends with a digest of the whole (still one key per step)."""
    key = ":".join(parts)
    if len(key) <= MAX_EFFECT_KEY:
        return key
    digest = hashlib.sha256(key.encode()).hexdigest()[:16]
    return f"{key[: MAX_EFFECT_KEY - 17]}~{digest}"


def parse_approval(answer: Any, key: str) -> tuple[bool, str | None]:
    """A callback's answer as (approved, the denial's message or None), or PermanentError
    saying what to send."""
    if isinstance(answer, bool):
        return answer, None
    if isinstance(answer, dict) and isinstance(answer.get("approved"), bool):
        message = answer.get("message")
        why = message if isinstance(message, str) and message else None
        return answer["approved"], None if answer["approved"] else why
    raise errors.PermanentError(f"approval {key!r}: answer with {ANSWER}, not {answer!r}")


def approval_details(item: Any) -> dict[str, Any]:
    """What an approval asks, kept with its callback for whoever answers: the tool call's
    name and arguments (Pydantic AI's ToolCallPart: ``tool_name``, ``args``; the OpenAI
    Agents SDK's ToolApprovalItem: ``tool_name``, ``arguments``), a JSON text as the value
    it holds, cut when long."""
    tool = getattr(item, "tool_name", None)
    args = (
        getattr(item, "args", None) if hasattr(item, "args") else getattr(item, "arguments", None)
    )
    if isinstance(args, str):
        with contextlib.suppress(ValueError):
            args = json.loads(args)
    try:  # as the details' bound measures it (ASCII JSON): a cut one stays within it
        shown = json.dumps(args, default=str, allow_nan=False)
    except ValueError:
        shown = json.dumps(str(args))
    if len(shown) > ARGS_SHOWN_CHARS:
        return {"tool": tool, "args": shown[: ARGS_SHOWN_CHARS - 1] + "…"}
    args = json.loads(shown)
    # A NUL in the arguments (escaped in the model's text) could not be stored: the text.
    return {"tool": tool, "args": shown if unstorable(args) else args}


def check_budget(budget: Any, who: str) -> None:
    """A run's ``budget=``: None or "provider/model", else PermanentError naming it."""
    ok = budget is None or (
        isinstance(budget, str) and 0 < len(budget) <= 200 and "/" in budget.strip("/")
    )
    if not ok:
        raise errors.PermanentError(
            f'{who}: budget must be "provider/model" as TASKLEASE_MODEL_BUDGETS names it, '
            f"not {budget!r}"
        )


@dataclass
class Steps:
    """One agent run's steps: the job's context, the key prefix and the counters that name
    the model requests (``<key>:model:<n>``) and the tool calls (by their call ids);
    ``stream_tokens``: whether the model's text goes to the job's stream as it comes."""

    ctx: JobContext[Any]
    key: str
    stream_tokens: bool = True
    budget: str | None = None  # "provider/model" the requests reserve under; None: the model's
    model_requests: int = 0
    tool_keys: set[str] = field(default_factory=set)
    tool_calls: int = 0

    def next_model_key(self) -> str:
        n = self.model_requests
        self.model_requests += 1
        return step_key(self.key, "model", str(n))

    async def chunks(self, key: str) -> ChunkStream | None:
        """Where model step ``key`` streams its text (``ChunkStream.said``, under the
        step's key: what earlier attempts recorded is not streamed again); None when the
        run does not stream tokens."""
        return await ChunkStream.open(self.ctx, key) if self.stream_tokens else None

    def reservation(self, model: str, request: Any) -> dict[str, Any]:
        """What a model request reserves under the shared budgets (``ctx.model_call``'s
        ``budget`` and ``tokens``): the run's budget, else ``model`` ("provider/model",
        as TASKLEASE_MODEL_BUDGETS names it; without a budget of that name only the
        tenant's daily tokens apply, if set), and an estimate of the request's input
        tokens (about four characters a token of its JSON); its usage settles it."""
        text = json.dumps(request, default=str, ensure_ascii=False)
        return {"budget": self.budget or model, "tokens": max(1, len(text) // 4)}

    def tool_key(self, name: str, tool_call_id: str | None) -> str:
        """``<key>:tool:<name>:<id>``; without an id, or with one the model gave before in
        this run, the tool call's ordinal in the run tells them apart."""
        n = self.tool_calls
        self.tool_calls += 1
        key = step_key(self.key, "tool", name, tool_call_id or f"#{n}")
        if key in self.tool_keys:
            key = step_key(self.key, "tool", name, f"{tool_call_id}#{n}")
        self.tool_keys.add(key)
        return key


async def ask_approval(
    ctx: JobContext[Any],
    key: str,
    call_id: str,
    item: Item,
    *,
    timeout: float,  # noqa: ASYNC109 - the approval's deadline, as wait_for_callback's
    notify: Callable[[str, Item], Awaitable[Any]] | None,
) -> tuple[bool, str | None]:
    """Wait on callback ``<key>:approve:<call_id>`` for a tool call that needs approval
    (``notify(token, item)`` tells whoever answers; the callback's details name the tool
    and its arguments), and read the answer as (approved, the denial's message or None);
    an unanswered call suspends the job. A callback answered with an error (the web
    view's Reject) is a denial saying that error."""
    wait_key = f"{key}:approve:{call_id}"

    def tell(token: str) -> Awaitable[Any]:
        assert notify is not None
        return notify(token, item)

    try:
        answer = await ctx.wait_for_callback(
            wait_key,
            timeout=timeout,
            notify=None if notify is None else tell,
            details=approval_details(item),
        )
    except errors.CallbackFailed as exc:
        return False, exc.error or str(exc)
    return parse_approval(answer, wait_key)
