"""Re-run and fork from the web view in a real browser (Playwright, Debian's chromium),
against a real API process and a real worker process: a dead letter re-run with an edited
payload (checked as JSON in the page, then by the API against the kind's schema, each
error shown in the editor) succeeds; a finished job forked from a step shows which steps
it inherited and which it ran. Screenshot ui-fork."""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from tests.conftest import Stack, api_client, job_row, wait_for
from tests.ui.test_web_view import browser, open_page, shoot, submit  # noqa: F401 (fixture)

pytestmark = pytest.mark.ui


def job_page(page: Any, url: str, job_id: str) -> None:
    page.goto(f"{url}/ui/#/jobs/{job_id}")
    page.wait_for_selector(f"dd:has-text('{job_id}')")


def new_job_id(page: Any, original: str) -> str:
    """The job the page moved to after a re-run or a fork."""
    page.wait_for_function(
        "(original) => location.hash.startsWith('#/jobs/') && !location.hash.includes(original)",
        arg=original,
    )
    return str(page.evaluate("location.hash").rsplit("/", 1)[1])


def test_a_dead_letter_rerun_with_an_edited_payload_and_a_fork_from_a_step(
    browser: Any,  # noqa: F811 (the fixture imported above)
    stack: Stack,
    sql: Any,
    request: pytest.FixtureRequest,
) -> None:
    url = stack.api()
    acme = stack.key("acme")
    client = api_client(url, acme)
    request.addfinalizer(client.close)
    stack.worker()
    doomed = submit(client, "demo.flaky", {"permanent": True}, max_attempts=1)
    steps = submit(client, "demo.sleep", {"seconds": 0.05, "steps": 3})
    wait_for(lambda: job_row(sql, doomed)["state"] == "dead_lettered", what="the dead letter")
    wait_for(lambda: job_row(sql, steps)["state"] == "succeeded", what="the 3-step job")

    page = open_page(browser, url, acme, viewport={"width": 1280, "height": 1000})

    # Re-run the dead letter: the editor holds its payload; bad JSON and a payload the
    # kind refuses are each shown in the editor, and nothing is sent or made.
    job_page(page, url, doomed)
    page.click("#rerun")
    editor = page.locator("#rerun-editor")
    assert editor.is_visible()
    assert '"permanent": true' in page.input_value("#rerun-editor textarea")
    jobs_before = sql.execute("SELECT count(*) AS n FROM jobs").fetchone()["n"]
    page.fill("#rerun-editor textarea", "{not json")
    page.click("#rerun-editor button[type=submit]")
    page.wait_for_selector("#rerun-editor .error:has-text('not JSON')")
    page.fill("#rerun-editor textarea", '{"permanent": false, "fail_attempts": "often"}')
    page.click("#rerun-editor button[type=submit]")
    page.wait_for_selector("#rerun-editor .error:has-text('fail_attempts')")
    assert sql.execute("SELECT count(*) AS n FROM jobs").fetchone()["n"] == jobs_before

    page.fill("#rerun-editor textarea", '{"permanent": false, "fail_attempts": 0}')
    page.click("#rerun-editor button[type=submit]")
    rerun = new_job_id(page, doomed)
    page.wait_for_selector("h1 .badge.s-succeeded", timeout=60_000)
    assert page.locator(f"dd a[href='#/jobs/{doomed}']").count() == 1  # "re-run of"
    row = job_row(sql, rerun)
    assert (row["rerun_of"], row["state"], row["payload"]) == (
        uuid.UUID(doomed),
        "succeeded",
        {"permanent": False, "fail_attempts": 0},
    )

    # Fork the 3-step job from its second step: the first is inherited, the rest run.
    job_page(page, url, steps)
    page.click("#effects tr[data-effect='step-1'] button.fork")
    page.wait_for_selector("#rerun-editor h3:has-text('1 earlier steps inherited')")
    page.click("#rerun-editor button[type=submit]")
    fork = new_job_id(page, steps)
    page.wait_for_selector("h1 .badge.s-succeeded", timeout=60_000)
    page.wait_for_selector("#effects tr[data-effect='step-2']")
    inherited = page.locator("#effects tr.inherited")
    assert inherited.count() == 1
    assert inherited.get_attribute("data-effect") == "step-0"
    assert "inherited from" in (inherited.text_content() or "")
    for key in ("step-1", "step-2"):
        cell = page.locator(f"#effects tr[data-effect='{key}'] td").nth(2).text_content() or ""
        assert cell.endswith("run"), (key, cell)
    assert page.locator("dd:has-text('step-1')").count() == 1  # the fork step, in the facts
    assert job_row(sql, fork)["result"] == {"steps": 3, "replayed": 1}
    page.locator("#effects").scroll_into_view_if_needed()  # the docs' shot: the steps
    shoot(page, "ui-fork")

    # The original lists its fork.
    job_page(page, url, steps)
    page.wait_for_selector(f"#reruns li[data-rerun='{fork}']")
    # The browser logs the one refusal asked for above (422); nothing else went wrong.
    assert [e for e in page.errors if "status of 422" not in e] == [], page.errors
    assert len(page.errors) == 1, page.errors


def test_an_operator_finds_a_dead_letter_by_a_payload_field_and_forks_it_from_its_failed_step(
    browser: Any,  # noqa: F811 (the fixture imported above)
    stack: Stack,
    sql: Any,
    request: pytest.FixtureRequest,
) -> None:
    # Given: a three-step job that failed for good at its third step (its first two
    # recorded), and another job of the kind that succeeded.
    url = stack.api()
    acme = stack.key("acme")
    client = api_client(url, acme)
    request.addfinalizer(client.close)
    stack.worker()
    doomed = submit(client, "demo.sleep", {"steps": 3, "fail_at": 2}, max_attempts=1)
    other = submit(client, "demo.sleep", {"steps": 1})
    wait_for(lambda: job_row(sql, doomed)["state"] == "dead_lettered", what="the dead letter")
    wait_for(lambda: job_row(sql, other)["state"] == "succeeded", what="the other job")

    # When: the operator searches by the payload field (a number), opens the one job found,
    page = open_page(browser, url, acme, viewport={"width": 1280, "height": 1000})
    page.fill("#f-search", "fail_at=2")
    page.press("#f-search", "Enter")
    wait_for(
        lambda: (
            page.eval_on_selector_all("#jobs tr[data-job]", "rs => rs.map(r => r.dataset.job)")
            == [doomed]
        ),
        what="the dead letter alone",
    )
    # Its link, read from the row found (the live list may redraw the row under a click).
    link = page.get_attribute(f"#jobs tr[data-job='{doomed}'] a[href^='#/jobs/']", "href")
    assert link == f"#/jobs/{doomed}"
    job_page(page, url, doomed)

    # and forks it from the step it failed in, with the fix (here, in its payload).
    page.click("#fork-last")
    page.wait_for_selector("#rerun-editor h3:has-text('all 2 recorded steps inherited')")
    page.fill("#rerun-editor textarea", '{"steps": 3}')
    page.click("#rerun-editor button[type=submit]")
    fork = new_job_id(page, doomed)

    # Then: the fork ran only the failed step onwards; the two before were inherited.
    page.wait_for_selector("h1 .badge.s-succeeded", timeout=60_000)
    assert job_row(sql, fork)["result"] == {"steps": 3, "replayed": 2}
    page.wait_for_selector("#effects tr[data-effect='step-2']")
    inherited = page.locator("#effects tr.inherited")
    assert [inherited.nth(i).get_attribute("data-effect") for i in range(2)] == ["step-0", "step-1"]
    assert page.locator("dd:has-text('after its last recorded step')").count() == 1
    assert page.errors == [], page.errors
