"""A tool that needs approval, run by TaskleaseAgent with ``approval_timeout``: the job
waits for a callback (holding no worker), and the run continues with the answer,
replaying what it recorded before the wait; against the fake model over real HTTP."""

from __future__ import annotations

import json
from typing import Any

import pytest
from pydantic_ai import Agent
from pydantic_ai.messages import ToolCallPart

from app.integrations.steps import approval_details
from app.kinds.waiting import MAX_DETAILS_BYTES
from examples import research_agent
from examples.research_agent import ResearchDeps
from tasklease import JobContext, PermanentError, kind
from tasklease.fakemodel import RunningServer
from tasklease.pydantic_ai import TaskleaseAgent, messages_json
from tasklease.testing import KindRun, KindSuspended, run_kind
from tests.unit.test_pydantic_ai import QUESTION, deps_for, requests_of, server

pytestmark = pytest.mark.unit
__all__ = ["server"]  # the fixture, used by name

WAIT = "pai:approve:call_1_pay"
PAID: list[int] = []
TOLD: list[tuple[str, str]] = []

agent: Agent[None, str] = Agent(instructions="Pay the invoice.")


@agent.tool_plain(requires_approval=True)
def pay(amount: int) -> str:
    PAID.append(amount)
    return f"paid {amount}"


durable = TaskleaseAgent(agent)


async def tell(token: str, call: ToolCallPart) -> str:
    TOLD.append((token, call.tool_name))
    return "told"


@kind("test.pai.approve", timeout_seconds=60)
async def invoice(ctx: JobContext[ResearchDeps], q: research_agent.Question) -> dict[str, Any]:
    result = await durable.run(
        ctx, q.question, model=ctx.deps.model, approval_timeout=3600, notify_approval=tell
    )
    return {"answer": result.output, "messages": messages_json(result)}


async def until_approval(deps: ResearchDeps) -> KindSuspended:
    PAID.clear()
    TOLD.clear()
    with pytest.raises(KindSuspended) as waiting:
        await run_kind(invoice, QUESTION, deps=deps)
    assert waiting.value.wait.kind == "callback"
    assert waiting.value.wait.key == WAIT
    assert PAID == []  # nothing paid before the answer
    assert [name for _, name in TOLD] == ["pay"]
    # What is asked, for whoever answers (the web view shows it by Approve and Reject).
    assert waiting.value.store.callback_details[WAIT] == {"tool": "pay", "args": {"amount": 1}}
    return waiting.value


async def answered(
    server: RunningServer, answer: Any = None, *, error: str | None = None
) -> KindRun[dict[str, Any]]:
    """Run the kind until it waits for approval, answer (or fail the callback with
    ``error``, as the web view's Reject does), and resume it."""
    deps = deps_for(server)
    try:
        waiting = await until_approval(deps)
        waiting.store.answer(WAIT, result=answer, error=error)
        return await waiting.resume(invoice, QUESTION, deps=deps)
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
    assert done.replayed[:2] == ["pai:start", "pai:model:0"]  # the request before the wait
    assert "pai.1:tool:pay:call_1_pay" in done.ran
    sent = requests_of(server)
    assert [r["answer"] for r in sent["requests"]] == ["tool:pay", "text"]
    assert sent["repeated"] == []
    parts = [p["part_kind"] for m in done.result["messages"] for p in m["parts"]]
    assert parts == ["user-prompt", "tool-call", "tool-return", "text"]


@pytest.mark.asyncio
async def test_a_denied_tool_never_runs_and_the_model_hears_why(server: RunningServer) -> None:
    done = await answered(server, {"approved": False, "message": "over budget"})
    assert PAID == []
    assert "pay said 'over budget'" in done.result["answer"]


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
    assert not any(":tool:" in k for k in done.ran)


def test_an_approval_s_details_name_the_tool_and_cut_long_arguments() -> None:
    """A JSON text of arguments is shown as the value it holds; a long one is cut so the
    callback's details stay within their bound."""
    call = ToolCallPart("save_note", '{"note": "hi"}', "c1")
    assert approval_details(call) == {"tool": "save_note", "args": {"note": "hi"}}
    assert approval_details(ToolCallPart("pay", "not json", "c2"))["args"] == "not json"
    nul = approval_details(ToolCallPart("pay", '{"to": "a\\u0000b"}', "c4"))
    assert nul["args"] == '{"to": "a\\u0000b"}'  # a NUL could not be stored: the text
    long = approval_details(ToolCallPart("save_note", {"note": "é" * 5000}, "c3"))
    assert long["args"].startswith('{"note": "\\u00e9') and long["args"].endswith("…")
    assert len(json.dumps(long).encode()) < MAX_DETAILS_BYTES


async def approve_notes(research: Any, deps: Any, wait: str, error: str | None) -> KindRun[Any]:
    """An example agent asked with approve_notes, until it waits on save_note's approval
    (which says what it would save), then answered: approved, or failed with ``error``
    (the web view's Reject). Its answer says what save_note did."""
    question = {**QUESTION, "approve_notes": True}
    try:
        with pytest.raises(KindSuspended) as waiting:
            await run_kind(research, question, deps=deps)
        assert waiting.value.wait.key == wait and "save_note" not in deps.calls
        asks = waiting.value.store.callback_details[wait]
        assert asks["tool"] == "save_note" and set(asks["args"]) == {"note"}
        waiting.value.store.answer(wait, result={"approved": True}, error=error)
        done: KindRun[Any] = await waiting.value.resume(research, question, deps=deps)
    finally:
        await deps.aclose()
    if error is None:
        assert deps.calls == ["search", "read_page", "save_note"]
        assert "save_note said 'saved" in done.result.answer, done.result.answer
    else:
        assert deps.calls == ["search", "read_page"]
        assert f"save_note said '{error}'" in done.result.answer, done.result.answer
    return done


@pytest.mark.parametrize("error", [None, "rejected in the web view"])
@pytest.mark.asyncio
async def test_the_research_example_asked_to_approve_notes_waits_then_saves_or_not(
    server: RunningServer, error: str | None
) -> None:
    """examples.research with approve_notes: Approve saves the note; Reject does not, and
    the run goes on to an answer that says so."""
    await approve_notes(
        research_agent.research, deps_for(server), "pai:approve:call_3_save_note", error
    )
