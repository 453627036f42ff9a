"""Builds the API: the runtime the routes depend on, its lifespan, the routers, the
body limit and the error answers."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

from fastapi import FastAPI
from fastapi_offline import FastAPIOffline

from app import __version__, kinds, tracing
from app.api import errors
from app.api.deps import Runtime
from app.api.middleware import RequestBody
from app.api.routes import ROUTERS
from app.settings import config

# Where the docs' assets are served from.
DOCS_ASSETS = "/docs-assets"


@contextlib.asynccontextmanager
async def _lifespan(app: FastAPI) -> AsyncIterator[None]:
    runtime: Runtime = app.state.runtime
    await runtime.open()
    try:
        yield
    finally:
        await runtime.close()


def create_app(settings: config.Settings | None = None) -> FastAPI:
    """The API for these settings (default: the environment's). Opens nothing: the
    lifespan does, or the first request when the lifespan is off (Lambda)."""
    settings = settings or config.load()
    # Traces exported by OTLP when OTEL_EXPORTER_OTLP_ENDPOINT is set (a bad one stops
    # start-up, naming it); otherwise the no-op API.
    tracing.configure("tasklease-api")
    # The kinds TASKLEASE_KINDS names: one that does not import stops start-up, naming it.
    kinds.load(settings)
    # /docs (Swagger UI) and /redoc load their scripts, styles and icon from this API
    # (fastapi-offline ships them), never from a CDN: the docs work without internet.
    app = FastAPIOffline(
        title="tasklease",
        version=__version__,
        summary="Durable asynchronous jobs for long AI work on SQS, Lambda and PostgreSQL.",
        lifespan=_lifespan,
        static_url=DOCS_ASSETS,
        # No badge fetched from validator.swagger.io.
        swagger_ui_parameters={"validatorUrl": None},
    )
    app.state.runtime = Runtime(settings)  # raises ConfigError before anything is served
    app.add_middleware(RequestBody, max_bytes=settings.max_body_bytes)
    errors.install(app)
    for router in ROUTERS:
        app.include_router(router)
    return app
