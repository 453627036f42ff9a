"""Lambda entry point for API Gateway (HTTP API, payload v2): the same FastAPI app via Mangum."""

from __future__ import annotations

from mangum import Mangum

from app import config, logs
from app.api import create_app

settings = config.load()
logs.setup(settings.log_level)
app = create_app(settings)
handler = Mangum(app, lifespan="auto")
