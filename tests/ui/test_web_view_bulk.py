"""Search and bulk actions in the web view (issue 33), in a real browser (headless
Chromium driven by Playwright) against a real API process: a job found by a payload field
from the search box, then every queued job of a kind cancelled by filter ("select all
matching", the dry run's count shown before confirming, the progress after), and no other
job touched. No worker runs: the jobs stay queued until the bulk cancel."""

from __future__ import annotations

from typing import Any

import pytest

from tests.conftest import Stack, api_client, wait_for
from tests.ui.test_web_view import browser, open_page, shoot, submit  # noqa: F401 (the fixture)

pytestmark = pytest.mark.ui


def shown(page: Any) -> list[str]:
    """The rows' job ids, read at once (the live list redraws its rows)."""
    found: list[str] = page.evaluate(
        "[...document.querySelectorAll('#jobs tr[data-job]')].map((r) => r.dataset.job)"
    )
    return found


def test_find_a_job_by_a_payload_field_and_bulk_cancel_every_queued_job_of_a_kind(
    browser: Any,  # noqa: F811 (the fixture imported above)
    stack: Stack,
    sql: Any,
    request: pytest.FixtureRequest,
) -> None:
    url = stack.api()
    acme = stack.key("acme")
    client = api_client(url, acme)
    request.addfinalizer(client.close)
    noops = [submit(client, "demo.noop", {"user_id": f"u-{i}"}) for i in range(6)]
    sleepers = [submit(client, "demo.sleep", {"seconds": 1}) for _ in range(2)]
    other = api_client(url, stack.key("globex"))
    request.addfinalizer(other.close)
    theirs = submit(other, "demo.noop", {"user_id": "u-4"})

    page = open_page(browser, url, acme, viewport={"width": 1280, "height": 900})
    wait_for(lambda: len(shown(page)) == 8, what="8 rows")

    # Find one job by a payload field from the search box.
    page.fill("#f-search", "user_id=u-4")
    page.press("#f-search", "Enter")
    wait_for(lambda: shown(page) == [noops[4]], what="the job with user_id u-4 alone")
    page.fill("#f-search", "")
    page.press("#f-search", "Enter")
    wait_for(lambda: len(shown(page)) == 8, what="every row again")

    # Every queued job of a kind: the filter, one row picked, then "all matching".
    page.select_option("#f-state", "queued")
    page.fill("#f-kind", "demo.noop")
    page.press("#f-kind", "Enter")
    wait_for(lambda: sorted(shown(page)) == sorted(noops), what="the six demo.noop rows")
    assert page.locator("#bulk").is_hidden()
    page.check(f'input.pick[data-job="{noops[0]}"]')
    assert page.text_content("#bulk-count") == "1 selected"
    page.click("#select-all-matching")
    assert page.text_content("#bulk-count") == "all jobs matching the filter"

    # The count before anything is done.
    page.click("#bulk-cancel")
    page.wait_for_selector("#bulk-confirm:not([hidden])")
    assert page.get_attribute("#bulk-confirm", "data-total") == "6"
    assert "6 jobs match" in (page.text_content("#bulk-confirm") or "")
    assert (
        sql.execute("SELECT count(*) AS n FROM jobs WHERE state = 'cancelled'").fetchone()["n"] == 0
    )
    page.click("#bulk-go")
    page.wait_for_selector("#bulk[data-state='done']")
    assert "6 of 6 (6 done, 0 skipped, 0 failed)" in (page.text_content("#bulk-status") or "")
    shoot(page, "ui-bulk")

    rows = sql.execute("SELECT id::text AS id, state::text AS state FROM jobs").fetchall()
    states = {r["id"]: r["state"] for r in rows}
    assert {states[j] for j in noops} == {"cancelled"}
    assert {states[j] for j in [*sleepers, theirs]} == {"queued"}
    # The page shows it: no queued demo.noop left.
    wait_for(lambda: shown(page) == [], what="no queued demo.noop row left")
    assert page.errors == []
