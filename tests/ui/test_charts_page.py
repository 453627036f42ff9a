"""The charts page and the job page's waterfall in a real browser (Chromium, Playwright)
against a real API process and a real worker process: the charts draw on their canvases
under the page's strict CSP (nothing refused), the legend's numbers are the API's, and
the job page shows a job's runs, waits and steps on its time axis, its children (loaded
when opened), its tokens and cost, its priority and whether it is parked."""

from __future__ import annotations

from typing import Any

import pytest

from tests import tree_kinds
from tests.conftest import Stack, api_client, job_row, wait_for
from tests.ui.test_web_view import browser, open_page, shoot, submit  # noqa: F401 (fixture)

pytestmark = pytest.mark.ui

FAST_RETRIES = {"TASKLEASE_BACKOFF_BASE_SECONDS": "0.05", "TASKLEASE_BACKOFF_CAP_SECONDS": "0.1"}
INKED = """(sel) => {
  const c = document.querySelector(sel);
  const d = c.getContext("2d").getImageData(0, 0, c.width, c.height).data;
  let n = 0;
  for (let i = 3; i < d.length; i += 4) if (d[i]) n++;
  return n;
}"""


def finished(sql: Any, *jobs: str) -> bool:
    return all(job_row(sql, j)["state"] in ("succeeded", "dead_lettered") for j in jobs)


def acme_api(stack: Stack, request: pytest.FixtureRequest) -> tuple[str, str, Any]:
    """An API process, acme's key, and a client of it closed when the test ends."""
    url = stack.api()
    acme = stack.key("acme")
    client = api_client(url, acme)
    request.addfinalizer(client.close)
    return url, acme, client


def test_the_charts_page_draws_the_api_s_series_under_the_csp(
    browser: Any,  # noqa: F811 (the fixture imported above)
    stack: Stack,
    sql: Any,
    request: pytest.FixtureRequest,
) -> None:
    url, acme, client = acme_api(stack, request)
    jobs = [submit(client, "demo.noop", {}) for _ in range(2)]
    jobs.append(submit(client, "demo.flaky", {"fail_attempts": 1}, max_attempts=3))
    jobs.append(submit(client, "demo.flaky", {"permanent": True}))
    stack.worker(env=FAST_RETRIES)
    wait_for(lambda: finished(sql, *jobs), what="4 jobs finished", timeout=60)

    page = open_page(browser, url, acme, viewport={"width": 1280, "height": 1000})
    page.evaluate(
        "window.__csp = []; document.addEventListener('securitypolicyviolation',"
        " (e) => window.__csp.push(e.violatedDirective + ' ' + e.blockedURI))"
    )
    page.click("nav >> text=Charts")
    page.wait_for_selector("#throughput canvas")
    page.wait_for_selector("#latency canvas")
    api = client.get("/v1/charts?window=hour").json()
    assert api["totals"] == {"submitted": 4, "succeeded": 3, "failed": 1, "dead_lettered": 1}
    for series, n in api["totals"].items():
        assert page.text_content(f'#totals dd[data-series="{series}"]') == str(n), series
    assert page.evaluate(INKED, "#throughput canvas") > 500  # lines and axes drawn
    assert page.evaluate(INKED, "#latency canvas") > 500
    finished_by_kind = {
        row.get_attribute("data-kind"): row.locator("td").nth(1).text_content()
        for row in page.locator("#per-kind tr").all()
    }
    assert finished_by_kind == {"": "4", "demo.noop": "2", "demo.flaky": "2"}

    # uPlot's own legend, under the cursor at the busiest minute, reads the API's numbers.
    times, submitted = api["times"], api["counts"]["submitted"]
    i = max(range(len(times)), key=lambda k: submitted[k])
    over = page.locator("#throughput .u-over").bounding_box()
    assert over is not None
    x = over["x"] + over["width"] * (times[i] - times[0]) / (times[-1] - times[0])
    page.mouse.move(x - 1, over["y"] + over["height"] / 2)
    legend = page.locator("#throughput .u-legend .u-series")
    wanted = {"submitted": submitted[i], "succeeded": api["counts"]["succeeded"][i]}
    for label, n in wanted.items():
        row = legend.filter(has_text=label)
        wait_for(lambda: row.locator(".u-value").text_content() == str(n), what=f"{label} {n}")  # noqa: B023
    shoot(page, "ui-charts")

    # Another window: the day's 15-minute buckets hold the same jobs.
    page.click('button[data-window="day"]')
    page.wait_for_selector('button[data-window="day"].on')
    assert page.text_content('#totals dd[data-series="submitted"]') == "4"
    page.select_option("#c-kind", "demo.flaky")
    wait_for(
        lambda: page.text_content('#totals dd[data-series="submitted"]') == "2",
        what="the kind's own totals",
    )
    flaky = client.get("/v1/charts?window=day&kind=demo.flaky").json()["latency"][0]
    assert flaky["finished"] == 2
    assert (page.text_content("#latency-title") or "").startswith("Latency: demo.flaky (p50 ")
    assert page.evaluate("window.__csp") == []
    assert page.errors == []


def test_the_job_page_shows_its_waterfall_children_usage_and_priority(
    browser: Any,  # noqa: F811
    stack: Stack,
    sql: Any,
    request: pytest.FixtureRequest,
) -> None:
    stack.env["TASKLEASE_KINDS"] = f"{stack.env['TASKLEASE_KINDS']},{tree_kinds.MODULE}"
    url, acme, client = acme_api(stack, request)
    fanout = submit(client, "demo.fanout", {"children": 2, "child_seconds": 0.3})
    tree = submit(client, "test.tree", {"grandchildren": 2})
    flaky = submit(client, "demo.flaky", {"fail_attempts": 1}, max_attempts=3, priority="high")
    written = submit(client, "demo.write", {"prompt": "Say something about queues", "words": 5})
    stack.worker(concurrency=2, env=FAST_RETRIES)
    wait_for(lambda: finished(sql, fanout, flaky, written, tree), what="4 jobs done", timeout=90)

    page = open_page(browser, url, acme, viewport={"width": 1280, "height": 1100})
    # The fan-out: a run before its wait for the children, the wait, a run after; a row
    # for each recorded step, each of the API's effects by key.
    page.goto(f"{url}/ui/#/jobs/{fanout}")
    page.wait_for_selector("#waterfall .row")
    job = client.get(f"/v1/jobs/{fanout}").json()
    effects = client.get(f"/v1/jobs/{fanout}/effects").json()
    assert page.locator('#waterfall [data-row="run"]').count() == job["runs"] == 2
    assert page.locator('#waterfall [data-row="wait"]').filter(has_text="waiting").count() == 1
    steps = page.locator('#waterfall [data-row="step"]')
    assert [s.get_attribute("data-label") for s in steps.all()] == [e["key"] for e in effects]
    # Each bar sits inside the track, after the one before it started.
    lefts = [
        float(b.get_attribute("style").split("left:")[1].split("%")[0])
        for b in page.locator("#waterfall .bar").all()
    ]
    assert lefts == sorted(lefts) and lefts[0] >= 0 and lefts[-1] <= 100
    assert page.text_content('[data-fact="priority"]') == "normal"
    assert page.text_content('[data-fact="parked"]') == "no"
    assert page.text_content('[data-fact="tokens"]') == "no model calls"
    assert page.text_content('[data-fact="kind version"]') == "version 1"  # as it started
    # The children, and theirs loaded when a child is opened (a nap has none).
    kids = page.locator("#family li[data-child]")
    assert sorted(k.get_attribute("data-child") for k in kids.all()) == sorted(
        c["id"] for c in job["children"]
    )
    kids.first.locator("button.toggle").click()
    kids.first.locator(".below >> text=no children").wait_for()
    page.evaluate("window.scrollTo(0, 0)")  # the docs' picture: the facts and the waterfall
    shoot(page, "ui-job")

    # Three generations: the child's children load when it is opened, and theirs.
    page.goto(f"{url}/ui/#/jobs/{tree}")
    (child,) = client.get(f"/v1/jobs/{tree}").json()["children"]
    grandkids = client.get(f"/v1/jobs/{child['id']}").json()["children"]
    opened = page.locator(f'#family li[data-child="{child["id"]}"]')
    assert opened.locator("li[data-child]").count() == 0  # not loaded before it is opened
    opened.locator("button.toggle").first.click()
    for g in grandkids:
        opened.locator(f'li[data-child="{g["id"]}"]').wait_for()
    assert opened.locator("li[data-child]").count() == len(grandkids) == 2
    # (A selector's first part may match the element it is scoped to: ".below" first.)
    opened.locator(".below li[data-child] button.toggle").first.click()
    opened.locator(".below li[data-child] .below >> text=no children").wait_for()
    opened.locator("button.toggle").first.click()  # closed again: its branch goes
    assert opened.locator("li[data-child]").count() == 0

    # A retried job: its first run failed (retrying), the backoff, the run that succeeded.
    page.goto(f"{url}/ui/#/jobs/{flaky}")
    page.wait_for_selector('#waterfall [data-row="run"] >> nth=1')
    runs = page.locator('#waterfall [data-row="run"]')
    assert "→ retrying" in (runs.nth(0).get_attribute("data-label") or "")
    assert runs.nth(0).locator(".bar.failed").count() == 1
    assert "→ succeeded" in (runs.nth(1).get_attribute("data-label") or "")
    assert page.locator('#waterfall [data-label="retry backoff"]').count() == 1
    assert page.text_content('[data-fact="priority"]') == "high"

    # A model call: the job's tokens and cost are the API's.
    page.goto(f"{url}/ui/#/jobs/{written}")
    usage = client.get(f"/v1/jobs/{written}").json()["usage"]
    assert usage["input_tokens"] > 0
    tokens = f"{usage['input_tokens']} in · {usage['output_tokens']} out"
    page.wait_for_selector(f'[data-fact="tokens"] >> text={tokens}')
    assert page.text_content('[data-fact="cost"]') == f"${usage['cost_usd']:.6f}"
    assert page.errors == []
