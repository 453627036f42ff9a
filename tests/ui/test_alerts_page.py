"""The web view's alerts page in a real browser: a real dead letter's alert, delivered to
a real receiver by a sweep, shows with where it went; an error with markup in it shows as
text; a tenant key sees its own tenant's alerts only, an admin key every tenant's."""

from __future__ import annotations

from typing import Any

import pytest

from app.services import sweeper
from tasklease.webhooks import new_secret
from tests.conftest import Stack, api_client, job_row
from tests.helpers import drain, engine_for

# browser: the fixture, shared with the web view's other tests.
from tests.ui.test_web_view import browser, in_thread, open_page, shoot, submit  # noqa: F401

pytestmark = pytest.mark.ui


def test_the_alerts_page_shows_a_dead_letters_alert_as_text_per_tenant(
    browser: Any,  # noqa: F811 - the fixture imported above
    stack: Stack,
    sql: Any,
    request: pytest.FixtureRequest,
) -> None:
    url = stack.api()
    receiver = stack.start_webhook(name="alerts-receiver")
    settings = stack.with_settings(
        alert_webhook_url=f"{receiver}/alerts", alert_webhook_secret=new_secret()
    )
    acme, globex, admin = stack.key("acme"), stack.key("globex"), stack.key("ops", admin=True)
    client = api_client(url, acme)
    request.addfinalizer(client.close)
    job_id = submit(client, "demo.flaky", {"permanent": True})

    async def dead_letter_and_sweep() -> None:
        async with engine_for(settings) as engine:
            await drain(engine, sql, [job_id])
            await sweeper.sweep_once(settings, engine.db, engine.queue)

    in_thread(dead_letter_and_sweep())
    assert job_row(sql, job_id)["state"] == "dead_lettered"
    # A second alert of globex's, not delivered yet, whose error holds markup.
    sql.execute(
        "INSERT INTO alerts (dedup_key, type, tenant, detail, attempts, last_error) VALUES "
        "('stalled:x:1', 'job.stalled', 'globex', "
        """'{"kind": "<b>bold</b>", "attempt": 1}', 1, 'tenant_webhook: <img src=x onerror=alert(1)>')"""
    )

    page = open_page(browser, url, acme, viewport={"width": 1280, "height": 900})
    page.goto(f"{url}/ui/#/alerts")
    page.wait_for_selector("#alerts tr[data-alert]")
    rows = page.locator("#alerts tr[data-alert]")
    assert rows.count() == 1
    text = rows.first.text_content() or ""
    assert "job.dead_lettered" in text and "permanent failure on purpose" in text
    # Delivered to the deployment's webhook, which is the operators' to see, not a tenant's.
    assert "the deployment's destinations" in text and "webhook" not in text
    assert page.locator(f"#alerts a[href='#/jobs/{job_id}']").count() == 1
    shoot(page, "ui-alerts")
    assert page.errors == []

    theirs = open_page(browser, url, globex)
    theirs.goto(f"{url}/ui/#/alerts")
    theirs.wait_for_selector("#alerts tr[data-alert]")
    assert theirs.locator("#alerts tr[data-alert]").count() == 1
    assert theirs.locator("#alerts img, #alerts b").count() == 0
    shown = theirs.text_content("#alerts") or ""
    assert "<b>bold</b>" in shown and "<img src=x onerror=alert(1)>" in shown

    ops = open_page(browser, url, admin)
    ops.goto(f"{url}/ui/#/alerts")
    ops.wait_for_selector("#alerts tr[data-alert]")
    assert ops.locator("#alerts tr[data-alert]").count() == 2
    delivered = ops.locator(f"#alerts tr[data-alert]:has(a[href='#/jobs/{job_id}'])")
    assert "webhook" in (delivered.text_content() or "")  # an admin sees where it went
    assert ops.errors == [] and theirs.errors == []
