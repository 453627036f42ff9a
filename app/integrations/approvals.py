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
from app.integrations.steps import ask_approval
from app.kinds.context import JobContext

# notify(token, call): hand the callback's token to whoever approves ``call``.
NotifyApproval = Callable[[str, ToolCallPart], Awaitable[Any]]


def with_deferred(output_type: Any) -> Any:
    """``output_type`` that may also end the run with ``DeferredToolRequests``."""
    base = list(output_type) if isinstance(output_type, list | tuple) else [output_type]
    return base if DeferredToolRequests in base else [*base, DeferredToolRequests]


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
        approved, message = await ask_approval(
            ctx, key, call.tool_call_id, call, timeout=timeout, notify=notify
        )
        answers[call.tool_call_id] = ToolDenied(message) if not approved and message else approved
    return DeferredToolResults(approvals=dict(answers))
