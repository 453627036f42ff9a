"""/ui: the web view, hand-written files (HTML, CSS, and JS modules: app.js, core.js and a
module a page in pages/, vendored libraries in vendor/) shipped in the package
(app/api/ui/), no build step and nothing from a CDN. The page holds no data: it
asks for an API key and reads the public /v1 API and its streams with it, so these routes
need no key. A strict Content-Security-Policy keeps any script but these files out."""

from __future__ import annotations

import re
from importlib import resources

from fastapi import APIRouter, Response
from fastapi.responses import RedirectResponse

from app import errors

router = APIRouter(include_in_schema=False)

TYPES = {
    ".html": "text/html; charset=utf-8",
    ".js": "text/javascript; charset=utf-8",
    ".css": "text/css; charset=utf-8",
}
# A file at the top, or one folder down (pages/, vendor/): no dots but the suffix's, so no
# way up and nothing but the web view's own files.
NAME = re.compile(r"(?:(?:pages|vendor)/)?[a-z0-9_-]+(\.html|\.js|\.css)")
# Scripts, styles and fetches from this origin only; no inline script, no frame, no plugin.
CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; "
    "img-src 'self' data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
)
HEADERS = {
    "Content-Security-Policy": CSP,
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-cache",
}


def _file(name: str) -> Response:
    match = NAME.fullmatch(name)
    path = resources.files("app.api.ui").joinpath(*name.split("/"))
    if match is None or not path.is_file():
        raise errors.NotFound(f"no file {name} in the web view")
    return Response(path.read_bytes(), media_type=TYPES[match[1]], headers=HEADERS)


@router.get("/ui")
async def ui_root() -> RedirectResponse:
    """The page's relative links need the trailing slash."""
    return RedirectResponse("ui/", status_code=307)  # relative: works under a stage prefix


@router.get("/ui/")
async def ui_index() -> Response:
    return _file("index.html")


@router.get("/ui/{name:path}")
async def ui_file(name: str) -> Response:
    return _file(name)
