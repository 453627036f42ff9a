"""The API's routes, one APIRouter per resource, in the order the document lists them."""

from __future__ import annotations

from app.api.routes import (
    alerts,
    callbacks,
    dead_letters,
    health,
    jobs,
    kinds,
    me,
    messages,
    metrics,
    schedules,
    state,
    streams,
    ui,
    usage,
)

ROUTERS = (
    jobs.router,
    messages.router,
    kinds.router,
    streams.router,
    state.router,
    callbacks.router,
    dead_letters.router,
    alerts.router,
    schedules.router,
    me.router,
    usage.router,
    health.router,
    metrics.router,
    ui.router,
)
