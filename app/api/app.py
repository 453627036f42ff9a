"""Builds the API: the runtime the routes depend on, its lifespan, the routers, the
body limit and the error answers."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

from fastapi import FastAPI

from app import __version__, config, kinds
from app.api import errors
from app.api.deps import Runtime
from app.api.middleware import RequestBody
from app.api.routes import ROUTERS


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
    # The kinds TASKLEASE_KINDS names: one that does not import stops start-up, naming it.
    kinds.load(settings)
    app = FastAPI(
        title="tasklease",
        version=__version__,
        summary="Durable asynchronous jobs for long AI work on SQS, Lambda and PostgreSQL.",
        lifespan=_lifespan,
    )
    app.state.runtime = Runtime(settings)  # raises ConfigError before anything is served
    app.add_middleware(RequestBody, max_bytes=settings.max_body_bytes)
    errors.install(app)
    for router in ROUTERS:
        app.include_router(router)
    return app
