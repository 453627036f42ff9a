"""/ui: the web view, three hand-written files (HTML, one JS module, CSS) shipped in the
package (app/api/ui/), no build step and nothing from a CDN. The page holds no data: it
asks for an API key and reads the public /v1 API and its streams with it, so these routes
need no key. A strict Content-Security-Policy keeps any script but these files out."""

from __future__ import annotations

from importlib import resources

from fastapi import APIRouter, Response
from fastapi.responses import RedirectResponse

from app import errors

router = APIRouter(include_in_schema=False)

FILES = {
    "index.html": "text/html; charset=utf-8",
    "app.js": "text/javascript; charset=utf-8",
    "app.css": "text/css; charset=utf-8",
}
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
    if name not in FILES:
        raise errors.NotFound(f"no file {name} in the web view")
    body = resources.files("app.api.ui").joinpath(name).read_bytes()
    return Response(body, media_type=FILES[name], headers=HEADERS)


@router.get("/ui")
async def ui_root() -> RedirectResponse:
    """The page's relative links need the trailing slash."""
    return RedirectResponse("ui/", status_code=307)  # relative: works under a stage prefix


@router.get("/ui/")
async def ui_index() -> Response:
    return _file("index.html")


@router.get("/ui/{name}")
async def ui_file(name: str) -> Response:
    return _file(name)
