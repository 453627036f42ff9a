"""Issue 31 in a real browser: the example agents (examples/research_agent on Pydantic
AI, examples/openai_agent on the OpenAI Agents SDK) asked with ``approve_notes`` pause
as `waiting` jobs on their save_note's approval, in a real worker process against the
fake model server (its own process, over real HTTP). The job's page says what is asked
(the tool and its arguments) beside Approve and Reject; Approve runs the tool once and
the job succeeds with its result in the answer, Reject denies it and the run goes on
to an answer that says so (the job succeeds: a rejection is not a failure)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.conftest import ROOT, Stack, api_client, job_row, wait_for
from tests.e2e.test_agent_crash import logged_tool_calls, start_fake_model
from tests.ui.test_web_view import browser, open_page, shoot, submit

pytestmark = pytest.mark.ui
__all__ = ["browser"]  # the fixture, used by name

QUESTION = {"question": "How often does an effect run?", "approve_notes": True}
# The example kinds, and the prefix of their settings (the model, the tools' log).
EXAMPLES = {"examples.research": "RESEARCH_AGENT_", "examples.openai_agent": "OPENAI_AGENT_"}
REJECTED = "rejected in the web view"  # what the page's Reject sends


def agents_stack(stack: Stack) -> tuple[str, str, Path]:
    """The API and one worker running the example agents against the fake model: the
    API's URL, a tenant's key, and the file the tools log their calls to."""
    stack.logs_dir.mkdir(parents=True, exist_ok=True)
    model_url = start_fake_model(stack)
    tools_log = stack.tmp / "tools.jsonl"
    stack.env.update(TASKLEASE_KINDS="examples.research_agent,examples.openai_agent")
    stack.env.update(PYTHONPATH=str(ROOT))
    for prefix in EXAMPLES.values():
        stack.env.update(
            {
                f"{prefix}BASE_URL": model_url,
                f"{prefix}API_KEY": "test-key",
                f"{prefix}MODEL": "fake-model",
                f"{prefix}TOOL_LOG": str(tools_log),
            }
        )
    url, key = stack.api(), stack.key("acme")
    stack.worker(concurrency=2)
    return url, key, tools_log


@pytest.mark.parametrize("button", ["approve", "reject"])
def test_the_example_agents_wait_for_approval_answered_in_the_web_view(
    browser: Any, stack: Stack, sql: Any, request: pytest.FixtureRequest, button: str
) -> None:
    url, key, tools_log = agents_stack(stack)
    client = api_client(url, key)
    request.addfinalizer(client.close)
    jobs = {kind: submit(client, kind, QUESTION) for kind in EXAMPLES}
    for job_id in jobs.values():
        wait_for(
            lambda j=job_id: job_row(sql, j)["state"] == "waiting",
            what="the agent waiting for approval",
            timeout=60,
        )
    saves = [c for c in logged_tool_calls(tools_log) if c["tool"] == "save_note"]
    assert saves == []  # nothing saved before a person answers

    page = open_page(browser, url, key, viewport={"width": 1280, "height": 900})
    for kind, job_id in jobs.items():
        wait = client.get(f"/v1/jobs/{job_id}").json()["waiting_for"]["key"]
        assert wait.endswith("_save_note"), wait
        (cb,) = client.get(f"/v1/jobs/{job_id}/callbacks").json()
        assert cb["details"]["tool"] == "save_note" and set(cb["details"]["args"]) == {"note"}

        # The job's page says what is asked, beside the buttons, and takes the answer.
        page.goto(f"{url}/ui/#/jobs/{job_id}")
        row = page.locator(f'[data-callback="{wait}"]')
        row.locator(f"button.{button}").wait_for()
        assert row.locator(".asks code.tool").text_content() == "save_note"
        assert cb["details"]["args"]["note"] in (row.locator(".asks pre.args").text_content() or "")
        shoot(page, f"ui-agent-{button}-{kind}")
        row.locator(f"button.{button}").click()

        wait_for(
            lambda j=job_id: job_row(sql, j)["state"] == "succeeded",
            what=f"{kind} to succeed after {button}",
            timeout=60,
        )
        answer = job_row(sql, job_id)["result"]["answer"]
        said = "saved" if button == "approve" else REJECTED
        assert f"save_note said '{said}'" in answer, answer
        page.wait_for_selector("h1 .badge.s-succeeded")
        answered = "succeeded" if button == "approve" else "failed"  # the callback's state
        page.wait_for_selector(f'[data-callback="{wait}"] .badge.s-{answered}')

    saves = [c for c in logged_tool_calls(tools_log) if c["tool"] == "save_note"]
    assert len(saves) == (2 if button == "approve" else 0), saves  # once each, or never
    assert page.errors == []
