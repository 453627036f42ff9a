"""The API's routes, one APIRouter per resource, in the order the document lists them."""

from __future__ import annotations

from app.api.routes import (
    alerts,
    bulk,
    callbacks,
    charts,
    dead_letters,
    health,
    jobs,
    kinds,
    me,
    messages,
    metrics,
    reruns,
    schedules,
    state,
    streams,
    ui,
    usage,
    workers,
)

ROUTERS = (
    jobs.router,
    reruns.router,
    bulk.router,
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
    charts.router,
    workers.router,
    health.router,
    metrics.router,
    ui.router,
)
