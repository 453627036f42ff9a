"""Issue 13 item 10: /docs and /redoc load every script, style and icon from the API
itself; no page references another host, so the docs work without internet."""

from __future__ import annotations

import html.parser
import re
import urllib.parse

import httpx
import pytest

from tests.conftest import Stack

# What this module checks does not depend on the carrier: it runs on moto only.
pytestmark = [pytest.mark.integration, pytest.mark.carrier_neutral]

# Any absolute URL: in the pages, none may point anywhere (the API's own are relative).
ABSOLUTE = re.compile(r"(?:https?:)?//[A-Za-z0-9.-]+\.[A-Za-z]{2,}")


class _Assets(html.parser.HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.urls: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        for name, value in attrs:
            if value and name in ("src", "href", "spec-url"):
                self.urls.append(value)


def assets(page: str) -> list[str]:
    parser = _Assets()
    parser.feed(page)
    return parser.urls


@pytest.mark.parametrize("path", ["/docs", "/redoc"])
def test_the_docs_load_every_asset_from_the_api_itself(stack: Stack, path: str) -> None:
    """Issue 13 item 10: a real API process serves the page and each asset it references
    (the OpenAPI document, the bundle, the stylesheet, the icon); none is on a CDN."""
    url = stack.api()
    with httpx.Client(base_url=url, timeout=30) as http:
        page = http.get(path)
        assert page.status_code == 200
        assert page.headers["content-type"].startswith("text/html")
        assert ABSOLUTE.findall(page.text) == []  # no CDN, no fonts, no validator badge
        assert "openapi.json" in page.text
        referenced = [*assets(page.text), "/openapi.json"]
        scripts = [u for u in referenced if u.endswith(".js")]
        assert scripts, referenced  # the UI's bundle is among them
        for asset in referenced:
            parts = urllib.parse.urlsplit(asset)
            assert not parts.scheme and not parts.netloc, asset
            got = http.get(asset)
            assert got.status_code == 200, asset
            assert len(got.content) > 0, asset
        if path == "/docs":
            assert '"validatorUrl": null' in page.text
