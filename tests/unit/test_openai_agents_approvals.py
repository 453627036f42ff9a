"""A tool with ``needs_approval``, run by durable_run with ``approval_timeout``: the job
waits for a callback (holding no worker), and the run continues from the SDK's RunState
with the answer, replaying what it recorded before the wait; against the fake model
over real HTTP."""

from __future__ import annotations

from typing import Any

import pytest
from agents import Agent, RunConfig, function_tool
from agents.items import ToolApprovalItem

from examples import openai_agent
from examples.openai_agent import AgentDeps, Question
from tasklease import JobContext, PermanentError, kind
from tasklease.fakemodel import RunningServer
from tasklease.openai_agents import durable_run, items_json
from tasklease.testing import KindRun, KindSuspended, run_kind
from tests.unit.test_openai_agents import QUESTION, deps_for
from tests.unit.test_pydantic_ai import requests_of, server
from tests.unit.test_pydantic_ai_approvals import approve_notes

pytestmark = pytest.mark.unit
__all__ = ["server"]  # the fixture, used by name

WAIT = "oai:approve:call_1_pay"
PAID: list[int] = []
TOLD: list[tuple[str, str | None]] = []


@function_tool(needs_approval=True)
def pay(amount: int) -> str:
    """Pay ``amount`` (a side effect: only once it is approved)."""
    PAID.append(amount)
    return f"paid {amount}"


agent: Agent[Any] = Agent(name="payer", instructions="Pay the invoice.", tools=[pay])


async def tell(token: str, item: ToolApprovalItem) -> str:
    TOLD.append((token, item.tool_name))
    return "told"


@kind("test.oai.approve", timeout_seconds=60)
async def invoice(ctx: JobContext[AgentDeps], q: Question) -> dict[str, Any]:
    result = await durable_run(
        ctx,
        agent,
        q.question,
        run_config=RunConfig(model=ctx.deps.model, tracing_disabled=True),
        approval_timeout=3600,
        notify_approval=tell,
    )
    return {"answer": result.final_output, "items": items_json(result)}


async def answered(
    server: RunningServer, answer: Any = None, *, error: str | None = None
) -> KindRun[dict[str, Any]]:
    """Run the kind until it waits for approval, answer (or fail the callback with
    ``error``, as the web view's Reject does), and resume it."""
    PAID.clear()
    TOLD.clear()
    deps = deps_for(server)
    try:
        with pytest.raises(KindSuspended) as waiting:
            await run_kind(invoice, QUESTION, deps=deps)
        assert (waiting.value.wait.kind, waiting.value.wait.key) == ("callback", WAIT)
        assert PAID == []  # nothing paid before the answer
        assert [name for _, name in TOLD] == ["pay"]
        details = waiting.value.store.callback_details[WAIT]
        assert details == {"tool": "pay", "args": {"amount": 1}}  # what the web view shows
        waiting.value.store.answer(WAIT, result=answer, error=error)
        return await waiting.value.resume(invoice, QUESTION, deps=deps)
    finally:
        await deps.aclose()


@pytest.mark.asyncio
async def test_an_approved_tool_runs_once_after_the_answer_and_nothing_repeats(
    server: RunningServer,
) -> None:
    done = await answered(server, {"approved": True})
    assert PAID == [1]
    assert len(TOLD) == 1  # the notify is an effect: not told again on resume
    assert done.result["answer"].endswith("From the tools: pay said 'paid 1'.")
    assert done.replayed[0] == "oai:model:0"  # the request before the wait
    assert done.ran == ["oai:tool:pay:call_1_pay", "oai:model:1"]
    sent = requests_of(server)
    assert [r["answer"] for r in sent["requests"]] == ["tool:pay", "text"]
    assert sent["repeated"] == []
    kinds = [i.get("type", i.get("role")) for i in done.result["items"]]
    assert kinds == ["user", "function_call", "function_call_output", "message"]


@pytest.mark.asyncio
async def test_a_denied_tool_never_runs_and_the_model_hears_why(server: RunningServer) -> None:
    done = await answered(server, {"approved": False, "message": "over budget"})
    assert PAID == []
    assert "pay said 'over budget'" in done.result["answer"]
    assert not any(":tool:" in k for k in done.effects)


@pytest.mark.asyncio
async def test_an_answer_that_is_not_an_approval_is_refused_saying_what_to_send(
    server: RunningServer,
) -> None:
    with pytest.raises(PermanentError, match=r"answer with true, false or \{\"approved\""):
        await answered(server, "sure")
    assert PAID == []


@pytest.mark.asyncio
async def test_a_rejected_callback_is_a_denial_and_the_run_goes_on_without_the_tool(
    server: RunningServer,
) -> None:
    """The web view's Reject answers the callback with an error: the tool is denied with
    that text, and the job succeeds rather than failing with CallbackFailed."""
    done = await answered(server, error="rejected in the web view")
    assert PAID == []
    assert "pay said 'rejected in the web view'" in done.result["answer"]
    assert not any(":tool:" in k for k in done.effects)


@pytest.mark.parametrize("error", [None, "rejected in the web view"])
@pytest.mark.asyncio
async def test_the_example_asked_to_approve_notes_waits_then_saves_or_not(
    server: RunningServer, error: str | None
) -> None:
    """examples.openai_agent with approve_notes: Approve saves the note; Reject does not,
    and the run goes on to an answer that says so."""
    await approve_notes(
        openai_agent.research, deps_for(server), "oai:approve:call_4_save_note", error
    )
