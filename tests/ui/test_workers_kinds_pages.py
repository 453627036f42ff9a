"""The Workers and Kinds pages in a real browser (headless Chromium, Playwright) against a
real API process and real worker processes: the Workers page lists a live worker and,
once its silence passes the bound, a SIGKILLed one as gone (without a reload); a tenant
key is told the list is an admin's. The Kinds page shows each kind's jobs by state for
the key's tenant, and a count's link opens the jobs list filtered by that kind and state.
Screenshot: ui-workers (and ui-kinds), in .tasklease/ui-artifacts/ (TASKLEASE_UI_SCREENSHOTS=docs:
docs/images/ too)."""

from __future__ import annotations

import os
import signal
from typing import Any

import pytest

from tests.conftest import Stack, api_client, wait_for
from tests.ui.test_web_view import DOCS, browser, open_page, shoot, submit

pytestmark = pytest.mark.ui
__all__ = ["browser"]  # the fixture, imported for the tests below


def shoot_for_docs(page: Any, name: str) -> None:
    shoot(page, name)
    if os.environ.get("TASKLEASE_UI_SCREENSHOTS") == "docs":
        page.screenshot(path=str(DOCS / f"{name}.png"), full_page=False)


def status_of(page: Any, name: str) -> str | None:
    row = page.locator(f'#workers tr[data-name="{name}"]')
    return row.get_attribute("data-status") if row.count() == 1 else None


def test_the_workers_page_shows_a_live_worker_and_a_killed_one_as_gone(
    browser: Any, stack: Stack
) -> None:
    stack.env["TASKLEASE_WORKER_HEARTBEAT_SECONDS"] = "0.5"
    stack.env["TASKLEASE_WORKER_GONE_SECONDS"] = "3"
    url = stack.api()
    admin, acme = stack.key("ops", admin=True), stack.key("acme")
    live = stack.worker(name="live")
    doomed = stack.worker(name="doomed")

    page = open_page(browser, url, admin, viewport={"width": 1280, "height": 700})
    page.click('#nav a[href="#/workers"]')
    page.wait_for_selector("#workers[data-loaded]")
    page.evaluate("window.__notReloaded = true")
    wait_for(
        lambda: status_of(page, live.name) == status_of(page, doomed.name) == "alive",
        what="both workers alive in the page",
        timeout=30,
    )

    doomed.send_signal(signal.SIGKILL)
    doomed.wait(timeout=10)
    wait_for(lambda: status_of(page, doomed.name) == "gone", what="the killed one gone", timeout=20)
    assert status_of(page, live.name) == "alive"
    row = page.locator(f'#workers tr[data-name="{doomed.name}"]')
    assert str(doomed.pid) in (row.text_content() or "")
    assert page.evaluate("window.__notReloaded") is True  # refreshed in place
    shoot_for_docs(page, "ui-workers")
    assert page.errors == []

    # A tenant key: the page says whose list it is, and asks nothing of the API.
    tenant_page = open_page(browser, url, acme)
    tenant_page.click('#nav a[href="#/workers"]')
    note = tenant_page.wait_for_selector("#workers-admin-only")
    assert "admin key" in (note.text_content() or "")
    assert tenant_page.locator("#workers").count() == 0
    assert tenant_page.errors == []


def test_the_kinds_page_counts_jobs_by_state_and_links_to_them(
    browser: Any, stack: Stack, request: pytest.FixtureRequest
) -> None:
    url = stack.api()
    acme, globex = stack.key("acme"), stack.key("globex")
    client = api_client(url, acme)
    other = api_client(url, globex)
    request.addfinalizer(client.close)
    request.addfinalizer(other.close)
    mine = [submit(client, "demo.noop", {}) for _ in range(3)]
    submit(client, "demo.sleep", {})
    for _ in range(4):
        submit(other, "demo.noop", {})  # another tenant's: not counted for acme

    page = open_page(browser, url, acme, viewport={"width": 1280, "height": 900})
    page.click('#nav a[href="#/kinds"]')
    page.wait_for_selector("#kinds tr[data-kind]")
    noop = page.locator('#kinds tr[data-kind="demo.noop"]')
    assert noop.locator('.kind-count[data-state="queued"]').text_content() == "queued 3"
    assert page.locator('#kinds tr[data-kind="demo.sleep"] .kind-count').count() == 1
    triage = page.locator('#kinds tr[data-kind="support.triage"]')
    assert "no jobs" in (triage.locator("td.counts").text_content() or "")
    assert "ticket_id*" in (triage.text_content() or "")
    assert (noop.locator("td.versions").text_content() or "").startswith("1")
    assert "resume" in (noop.locator("td.versions").text_content() or "")
    shoot_for_docs(page, "ui-kinds")

    # The count's link: the jobs list, filtered by the kind and the state.
    noop.locator('.kind-count[data-state="queued"] a').click()
    page.wait_for_selector("#flow[data-loaded]")
    wait_for(lambda: page.locator("#jobs tr[data-job]").count() == 3, what="acme's 3 noop jobs")
    assert page.input_value("#f-kind") == "demo.noop"
    assert page.input_value("#f-state") == "queued"
    shown = {page.locator("#jobs tr[data-job]").nth(i).get_attribute("data-job") for i in range(3)}
    assert shown == set(mine)
    assert page.errors == []


def test_keys_show_on_the_kinds_page_and_the_job_page_and_filter_the_jobs_list(
    browser: Any, stack: Stack, request: pytest.FixtureRequest
) -> None:
    """Flow control by key: each kind's limits per key on the Kinds page; a job's key on
    its page as text (a key holding markup stays text), whether the job waits for its key,
    a link to the key's jobs, which the jobs list's key field filters (any kind of the
    key, the tenant's only)."""
    url = stack.api()
    client = api_client(url, stack.key("acme"))
    request.addfinalizer(client.close)
    key = '<img src=x onerror="window.__xss=1">c-1'
    mine = [submit(client, "demo.converse", {"conversation": key, "text": t}) for t in "ab"]
    submit(client, "demo.converse", {"conversation": "c-2", "text": "c"})  # another key
    submit(client, "demo.noop", {})  # no key

    page = open_page(browser, url, stack.key("acme"), viewport={"width": 1400, "height": 900})
    page.click('#nav a[href="#/kinds"]')
    page.wait_for_selector("#kinds tr[data-kind]")

    def flow_of(kind: str) -> str:
        cell = page.locator(f'#kinds tr[data-kind="{kind}"] td.flow-control')
        return cell.text_content() or ""

    assert flow_of("demo.converse") == "key from payload; 1 at a time"
    assert flow_of("demo.reindex") == "key from payload; debounce 2 s"
    assert flow_of("demo.sync") == "key from payload; 2 starts per 1 s"
    assert flow_of("demo.noop") == "none"

    # The second message to the conversation waits for its key, as `jobs show` says.
    page.goto(f"{url}/ui/#/jobs/{mine[1]}")
    waits = page.wait_for_selector('[data-fact="waits for its key"]')
    assert (waits.text_content() or "").startswith("for its key: its key's concurrency")
    assert page.text_content('[data-fact="the key\'s jobs"]') == (
        "0 others holding it, 1 queued before this one, 2 unfinished"
    )
    page.goto(f"{url}/ui/#/jobs/{mine[0]}")
    fact = page.wait_for_selector('[data-fact="key"]')
    assert fact.text_content() == key
    assert page.locator('[data-fact="key"] img').count() == 0
    assert page.text_content('[data-fact="waits for its key"]') == "no"
    page.click("#job-key")
    page.wait_for_selector("#flow[data-loaded]")
    assert page.input_value("#f-key") == key
    wait_for(
        lambda: page.locator("#jobs tr[data-job]").count() == 2, what="the key's two jobs only"
    )
    shown = {page.locator("#jobs tr[data-job]").nth(i).get_attribute("data-job") for i in range(2)}
    assert shown == set(mine)
    assert page.evaluate("window.__xss") is None
    assert page.errors == []
