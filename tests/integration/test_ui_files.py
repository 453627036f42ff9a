"""/ui serves the web view's files (the page, its style, its JS modules) from the package, with a strict
Content-Security-Policy, needing no key (the page holds no data), and nothing else."""

from __future__ import annotations

from typing import Any

import pytest

pytestmark = pytest.mark.integration


def test_the_web_view_files_are_served_with_a_strict_csp_and_nothing_else(api: Any) -> None:
    bare = api.get("/ui", follow_redirects=False, headers={"Authorization": ""})
    assert bare.status_code == 307 and bare.headers["location"] == "ui/"

    page = api.get("/ui/", headers={"Authorization": ""})
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    csp = page.headers["content-security-policy"]
    assert "default-src 'none'" in csp and "script-src 'self'" in csp
    assert "unsafe-inline" not in csp and "unsafe-eval" not in csp
    assert '<script type="module" src="app.js"></script>' in page.text
    assert "http://" not in page.text and "https://" not in page.text  # no CDN

    modules = ("app.js", "core.js", "pages/overview.js", "pages/job.js", "pages/lists.js")
    # The charts' page and the job page's waterfall, and uPlot vendored (no CDN).
    for module in (
        *modules,
        "pages/charts.js",
        "pages/steps.js",
        "pages/search.js",
        "pages/alerts.js",
        "vendor/uplot.js",
    ):
        script = api.get(f"/ui/{module}")
        assert script.status_code == 200, module
        assert script.headers["content-type"].startswith("text/javascript")
        assert "innerHTML" not in script.text  # data goes in as text only
    for sheet in ("app.css", "pages/charts.css", "vendor/uplot.css"):
        assert api.get(f"/ui/{sheet}").headers["content-type"].startswith("text/css"), sheet

    for name in (
        "nope.js",
        "__init__.py",
        "..%2F..%2Fconfig.py",
        "pages/%2E%2E/core.js",
        "other/app.js",
        "pages/nope.js",
    ):
        resp = api.get(f"/ui/{name}")
        assert resp.status_code == 404, (name, resp.text)
