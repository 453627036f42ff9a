"""Lambda entry point for API Gateway (HTTP API, payload v2): the same FastAPI app via Mangum."""

from __future__ import annotations

from typing import Any

from mangum import Mangum

from app import tracing
from app.api import create_app
from handlers import emf, runtime

settings = runtime.load_settings()
app = create_app(settings)
# API Gateway cannot stream a response from a Python Lambda: the stream routes answer
# long polls (?after=) here, and their readers poll the tables.
app.state.runtime.streaming = False
# GET /metrics asks for no key (as Prometheus scrapes): behind API Gateway it would be
# public, so it is 404 here; the metrics go to CloudWatch as EMF lines instead.
app.state.runtime.serve_metrics = False
# The process may be frozen once it answers: a request's sent outbox row is marked sent
# before the answer, not a moment later with others' (the relay would send it again).
app.state.runtime.record_sends_later = False
# Mangum would run the lifespan around every invocation, closing the pool each time;
# the app opens its clients on the first request instead and keeps them while warm.
_mangum = Mangum(app, lifespan="off")
# How long a request's answer waits for its spans' export (the worker's invocations wait
# for tracing's default: no caller waits on them).
API_FLUSH_MILLIS = 500


def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    """One API Gateway request; then its metrics go out as EMF log lines and its spans
    are exported (the process may be frozen once this returns)."""
    try:
        return dict(_mangum(event, context))
    finally:
        emf.flush()
        # The caller waits for this: a slow collector costs it at most half a second.
        tracing.flush(API_FLUSH_MILLIS)
