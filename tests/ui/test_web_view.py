"""The web view (/ui) in a real browser: headless Chromium (Debian's package) driven by
Playwright, against a real API process and a real worker process. The page is given a
key once, then watches the jobs move without a reload, opens a job's timeline, approves
a waiting job, redrives a dead letter with an admin key; another tenant's key sees none
of it. Screenshots go to .tasklease/ui-artifacts/ (and, with
TASKLEASE_UI_SCREENSHOTS=docs, to docs/images/ for the README and the docs site)."""

from __future__ import annotations

import asyncio
import concurrent.futures
import os
import shutil
from collections.abc import Iterator
from typing import Any

import pytest

from tests.conftest import ROOT, Stack, api_client, job_row, unavailable, wait_for
from tests.helpers import engine_for, receive_records

pytestmark = pytest.mark.ui

ARTIFACTS = ROOT / ".tasklease" / "ui-artifacts"
DOCS = ROOT / "docs" / "images"
FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
TIMEOUT_MS = 20_000


def chromium_path() -> str | None:
    return os.environ.get("TASKLEASE_CHROMIUM") or next(
        (p for p in map(shutil.which, ("chromium", "chromium-browser")) if p), None
    )


@pytest.fixture
def browser(stack: Stack) -> Iterator[Any]:
    """After the stack: Playwright's sync API runs an event loop in this thread, where the
    stack's set-up (asyncio.run) could not."""
    from playwright.sync_api import sync_playwright

    path = chromium_path()
    if path is None:
        unavailable("chromium", "no chromium executable (make test-ui installs Debian's)")
    with sync_playwright() as pw:
        b = pw.chromium.launch(executable_path=path, args=FLAGS)
        yield b
        b.close()


def shoot(page: Any, name: str) -> None:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / f"{name}.png"), full_page=True)
    if os.environ.get("TASKLEASE_UI_SCREENSHOTS") == "docs" and name in (
        "ui-overview",
        "ui-job",
        "ui-charts",
        "ui-fork",
    ):
        # Not the toast of the outage this test causes on purpose (it lasts 4 s).
        page.evaluate("document.getElementById('toast').hidden = true")
        page.screenshot(path=str(DOCS / f"{name}.png"), full_page=False)


def open_page(browser: Any, url: str, key: str, **context: Any) -> Any:
    page = browser.new_context(**context).new_page()
    page.set_default_timeout(TIMEOUT_MS)
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.errors = errors
    page.goto(f"{url}/ui")
    page.fill("#key", key)
    page.click("#login-form button")
    page.wait_for_selector("#flow[data-loaded]")
    return page


def count(page: Any, state: str) -> int:
    return int(page.text_content(f"#count-{state}") or "0")


def submit(client: Any, kind: str, payload: dict[str, Any], **extra: Any) -> str:
    resp = client.post("/v1/jobs", json={"kind": kind, "payload": payload, **extra})
    assert resp.status_code == 202, resp.text
    return str(resp.json()["id"])


def test_the_web_view_watches_approves_and_redrives_and_keeps_tenants_apart(
    browser: Any, stack: Stack, sql: Any, request: pytest.FixtureRequest
) -> None:
    url = stack.api()
    acme, globex, admin = stack.key("acme"), stack.key("globex"), stack.key("ops", admin=True)
    client = api_client(url, acme)
    request.addfinalizer(client.close)

    # The served page: a strict CSP, no inline script.
    served = client.get("/ui/")
    assert served.status_code == 200
    csp = served.headers["Content-Security-Policy"]
    assert "script-src 'self'" in csp and "unsafe-inline" not in csp
    assert "<script>" not in served.text

    page = open_page(browser, url, acme, viewport={"width": 1280, "height": 900})
    assert page.text_content("#who") == "acme"
    page.evaluate("window.__notReloaded = true")

    # Jobs submitted after the page opened show up in the counts and the rows, live.
    sleepers = [submit(client, "demo.sleep", {"seconds": 0.3, "steps": 3}) for _ in range(2)]
    approval = submit(client, "demo.approval", {"timeout_seconds": 600})
    doomed = submit(client, "demo.flaky", {"permanent": True}, max_attempts=1)
    wait_for(lambda: count(page, "queued") == 4, what="4 queued in the page", timeout=15)
    wait_for(lambda: page.locator("#jobs tr[data-job]").count() == 4, what="4 rows")

    stack.worker(concurrency=2)
    wait_for(
        lambda: (
            (count(page, "succeeded"), count(page, "waiting"), count(page, "dead_lettered"))
            == (2, 1, 1)
        ),
        what="2 succeeded, 1 waiting, 1 dead-lettered in the page",
        timeout=60,
    )
    assert page.locator(f'#jobs tr[data-job="{doomed}"][data-state="dead_lettered"]').count() == 1
    assert page.evaluate("window.__notReloaded") is True
    shoot(page, "ui-overview")

    # The stream drops (the API process is killed): the page says so, reconnects with
    # Last-Event-ID to the API started again, and catches up on a job that finished meanwhile.
    late = submit(client, "demo.sleep", {"seconds": 1.5})
    api_proc = stack.procs[0]
    api_proc.kill()
    api_proc.wait()
    wait_for(lambda: page.get_attribute("#live", "class") == "live", what="the drop seen")
    wait_for(lambda: job_row(sql, late)["state"] == "succeeded", what="the job done meanwhile")
    assert count(page, "succeeded") == 2
    stack.start_api(int(url.rsplit(":", 1)[1]), name="api-again")
    wait_for(lambda: count(page, "succeeded") == 3, what="the page caught up", timeout=15)
    assert page.get_attribute("#live", "class") == "live on"
    assert page.evaluate("window.__notReloaded") is True
    # What the browser logged of the drop (refused connections) is all it logged.
    assert all("ERR_" in e for e in page.errors), page.errors
    page.errors.clear()
    page.click("#theme")  # the dark theme, whatever the system prefers
    shoot(page, "ui-overview-other-theme")
    page.click("#theme")

    # A job's timeline and progress.
    page.click(f'#jobs tr[data-job="{sleepers[0]}"] a')
    page.wait_for_selector("#timeline tr >> text=succeeded")
    page.wait_for_selector("#note >> text=step 3 of 3")
    assert page.locator("#effects tr").count() == 3
    assert page.locator("#effects >> text=replayed").count() == 0  # one run ran them all

    # Approve the waiting job from its page; it runs on and succeeds.
    page.goto(f"{url}/ui/#/jobs/{approval}")
    page.wait_for_selector('[data-callback="approve"] button.approve')
    shoot(page, "ui-job-waiting")
    page.click('[data-callback="approve"] button.approve')
    wait_for(lambda: job_row(sql, approval)["state"] == "succeeded", what="approval succeeded")
    assert job_row(sql, approval)["result"]["approved"] is True
    page.wait_for_selector("h1 .badge.s-succeeded")
    # Its second run replayed what the first one recorded (the callback, the notify).
    page.wait_for_selector("#effects tr:has-text('notify:approve') >> text=replayed")
    shoot(page, "ui-job-approved")
    assert page.errors == []

    # An admin key redrives the dead letter from the dead-letters page.
    page.click("#logout")
    page.fill("#key", admin)
    page.click("#login-form button")
    page.wait_for_selector("#who >> text=ops · admin")
    page.goto(f"{url}/ui/#/dead-letters")
    page.wait_for_selector(f'#dead-letters tr[data-job="{doomed}"] >> text=permanent failure')
    shoot(page, "ui-dead-letters")
    page.click(f'#dead-letters tr[data-job="{doomed}"] button.redrive')
    wait_for(lambda: job_row(sql, doomed)["redrives"] == 1, what="the dead letter redriven")

    # Another tenant's key sees nothing of acme's: no counts, no rows, no job page.
    other = open_page(browser, url, globex, viewport={"width": 390, "height": 844})
    assert sum(count(other, s) for s in ("queued", "succeeded", "waiting", "dead_lettered")) == 0
    other.wait_for_selector("#jobs >> text=no jobs")
    noop = submit(client, "demo.noop", {})
    wait_for(lambda: job_row(sql, noop)["state"] == "succeeded", what="acme's noop")
    other.reload()  # the key stays in the tab's session storage
    other.wait_for_selector("#jobs >> text=no jobs")
    other.wait_for_selector("#flow[data-loaded]")  # the rows may come before the counts
    assert count(other, "succeeded") == 0 and other.locator("#jobs tr[data-job]").count() == 0
    other.goto(f"{url}/ui/#/jobs/{approval}")
    other.wait_for_selector(f"#view .error >> text=no job {approval}")
    other.goto(f"{url}/ui/#/dead-letters")
    other.wait_for_selector("#dead-letters >> text=no dead letters")
    shoot(other, "ui-phone-other-tenant")


def in_thread(coro: Any) -> Any:
    """``asyncio.run`` on a thread of its own: Playwright's sync API holds this one's loop."""
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, coro).result()


async def handle_once(stack: Stack) -> None:
    async with engine_for(stack.settings) as engine:
        await engine.handle({"Records": await receive_records(engine, wait=3)}, None)


def test_a_waiting_job_shows_its_runs_attempts_wait_and_deadline_in_creation_order(
    browser: Any, stack: Stack, sql: Any, request: pytest.FixtureRequest
) -> None:
    """Issue 30 items 9 and 12: a job that ran twice and waits showed "attempt 0 of 5";
    the list showed neither what a job waits for nor until when, and an "updated" column
    beside rows sorted by creation. The page shows runs and attempts used as the job's
    JSON counts them, the wait and its deadline, and the time the rows are sorted by."""
    url = stack.api()
    acme = stack.key("acme")
    client = api_client(url, acme)
    request.addfinalizer(client.close)
    nap = submit(client, "demo.nap", {"seconds": 1, "naps": 2})
    for runs in (1, 2):  # the first message, then the first timer's
        in_thread(handle_once(stack))
        assert (job_row(sql, nap)["state"], job_row(sql, nap)["runs"]) == ("waiting", runs)
    later = submit(client, "demo.noop", {}, delay_seconds=3600)
    job = client.get(f"/v1/jobs/{nap}").json()  # what the page reads

    page = open_page(browser, url, acme, viewport={"width": 1280, "height": 900})
    wait_for(lambda: page.locator("#jobs tr[data-job]").count() == 2, what="2 rows")
    headers = page.locator("table.jobs thead th").all_text_contents()
    assert headers == [
        "",  # the rows' checkboxes (bulk actions: tests/ui/test_web_view_bulk.py)
        "job",
        "kind",
        "state",
        "runs",
        "attempts used",
        "waiting for",
        "until",
        "tenant",
        "created",
    ]
    order = page.locator("#jobs tr[data-job]").evaluate_all("rows => rows.map(r => r.dataset.job)")
    assert order == [later, nap]  # newest created first, as the created column reads
    row = dict(
        zip(
            headers, page.locator(f'#jobs tr[data-job="{nap}"] td').all_text_contents(), strict=True
        )
    )
    local = "t => new Date(t).toLocaleString()"
    assert (row["runs"], row["attempts used"]) == ("2", "0/5"), row
    assert row["waiting for"] == "timer nap-1", row
    assert row["until"] == page.evaluate(local, job["waiting_for"]["until"]), row
    assert row["created"] == page.evaluate(local, job["created_at"]), row
    shoot(page, "ui-waiting-list")

    page.click(f'#jobs tr[data-job="{nap}"] a')
    page.wait_for_selector("h1 .badge.s-waiting")
    facts = dict(
        zip(
            page.locator("dl.facts dt").all_text_contents(),
            page.locator("dl.facts dd").all_text_contents(),
            strict=True,
        )
    )
    assert (facts["runs"], facts["attempts used"]) == ("2", "0 of 5"), facts
    assert facts["worker"] == "none (no lease)", facts
    page.wait_for_selector("#waits >> text=waiting for timer")
    assert page.errors == []


def test_a_message_sent_from_the_job_page_wakes_the_job_and_shows_as_text(
    browser: Any, stack: Stack, sql: Any, request: pytest.FixtureRequest
) -> None:
    """Issue 32: the job page lists a job's messages and sends one (topic and JSON body);
    a body with markup in it shows as text, and a finished job's page has no form."""
    url = stack.api()
    acme = stack.key("acme")
    client = api_client(url, acme)
    request.addfinalizer(client.close)
    chat = submit(client, "demo.chat", {"messages": 1})
    in_thread(handle_once(stack))
    assert job_row(sql, chat)["state"] == "waiting"

    page = open_page(browser, url, acme, viewport={"width": 1280, "height": 900})
    page.goto(f"{url}/ui/#/jobs/{chat}")
    page.wait_for_selector("#messages >> text=no messages")
    page.fill("#send-message textarea", "{nope")
    page.click("#send-message button")
    page.wait_for_selector("#toast >> text=the body is not JSON")
    page.fill("#send-message textarea", '{"text": "<img src=x onerror=alert(1)>"}')
    page.click("#send-message button")
    page.wait_for_selector("#toast >> text=sent: the job is woken")
    page.wait_for_selector("#messages tr[data-message] >> text=unread")
    assert page.locator("#messages img").count() == 0
    assert "<img src=x onerror=alert(1)>" in page.text_content("#messages pre")
    assert job_row(sql, chat)["state"] == "queued"

    in_thread(handle_once(stack))
    assert job_row(sql, chat)["state"] == "succeeded"
    page.reload()
    page.wait_for_selector("h1 .badge.s-succeeded")
    wait_for(lambda: page.locator("#messages >> text=unread").count() == 0, what="read")
    assert page.locator("#send-message").is_hidden()
    shoot(page, "ui-job-messages")
    assert page.errors == []


def test_a_job_page_shows_the_state_it_publishes_live_and_as_text(
    browser: Any, stack: Stack, sql: Any, request: pytest.FixtureRequest
) -> None:
    """The job page's State card: every key GET /v1/jobs/{id}/state has, then each change
    as the stream's state events bring it, without a reload; a value is text, never HTML."""
    url = stack.api()
    acme = stack.key("acme")
    client = api_client(url, acme)
    request.addfinalizer(client.close)
    job = submit(client, "demo.publish", {"steps": 3, "seconds": 0.5})
    markup = '<img src=x onerror="window.__owned=1"> [red]not markup'
    sql.execute(
        "INSERT INTO published_state (job_id, key, value, version, attempt) "
        "VALUES (%s, 'note', to_jsonb(%s::text), 1, 0)",
        (job, markup),
    )
    page = open_page(browser, url, acme, viewport={"width": 1280, "height": 900})
    page.goto(f"{url}/ui/#/jobs/{job}")
    page.wait_for_selector('#state tr[data-key="note"]')
    assert page.text_content('#state tr[data-key="note"] pre') == markup
    page.evaluate("window.__notReloaded = true")

    stack.worker()
    page.wait_for_selector('#state tr[data-key="phase"] >> text=finished')
    cells = page.locator('#state tr[data-key="done"] td').all_text_contents()
    assert cells[:3] == ["done", "3", "3"], cells
    assert page.evaluate("window.__notReloaded") is True
    assert page.evaluate("window.__owned") is None
    shoot(page, "ui-job-state")
    assert page.errors == []
