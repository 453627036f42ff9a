"""Tools that need approval (Pydantic AI's ``requires_approval`` / ``ApprovalRequired``)
as tasklease callbacks: the run ends with ``DeferredToolRequests``, each call waits for
``POST /v1/callbacks/{token}`` holding no worker, and the next run continues with the
answers. Used by ``TaskleaseAgent.run(..., approval_timeout=...)``."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from pydantic_ai import DeferredToolRequests, DeferredToolResults, ToolDenied
from pydantic_ai.messages import ToolCallPart

from app import errors
from app.integrations.steps import parse_approval
from app.kinds.context import JobContext

# notify(token, call): hand the callback's token to whoever approves ``call``.
NotifyApproval = Callable[[str, ToolCallPart], Awaitable[Any]]


def with_deferred(output_type: Any) -> Any:
    """``output_type`` that may also end the run with ``DeferredToolRequests``."""
    base = list(output_type) if isinstance(output_type, list | tuple) else [output_type]
    return base if DeferredToolRequests in base else [*base, DeferredToolRequests]


def approval_of(answer: Any, key: str) -> bool | ToolDenied:
    """A callback's answer as Pydantic AI's approval, or PermanentError saying what to send."""
    approved, message = parse_approval(answer, key)
    return ToolDenied(message) if not approved and message else approved


async def approvals(
    ctx: JobContext[Any],
    key: str,
    requests: DeferredToolRequests,
    *,
    timeout: float,  # noqa: ASYNC109 - each approval's deadline, as wait_for_callback's
    notify: NotifyApproval | None,
) -> DeferredToolResults:
    """Wait for an answer to each call in ``requests.approvals``, in order (callback
    ``<key>:approve:<tool_call_id>``); a call still unanswered suspends the job."""
    if requests.calls:
        names = ", ".join(sorted({c.tool_name for c in requests.calls}))
        raise errors.PermanentError(
            f"{key}: tools deferred for outside execution ({names}) are not run by "
            "TaskleaseAgent: give them no CallDeferred, or handle DeferredToolRequests yourself"
        )
    answers: dict[str, bool | ToolDenied] = {}
    for call in requests.approvals:
        wait_key = f"{key}:approve:{call.tool_call_id}"

        def tell(token: str, call: ToolCallPart = call) -> Awaitable[Any]:
            assert notify is not None
            return notify(token, call)

        answer = await ctx.wait_for_callback(
            wait_key, timeout=timeout, notify=None if notify is None else tell
        )
        answers[call.tool_call_id] = approval_of(answer, wait_key)
    return DeferredToolResults(approvals=dict(answers))
