"""GET /metrics: Prometheus' text format, without an API key (as Prometheus scrapes).

Nothing in it names a tenant (app/metrics.py): what it shows is the deployment's flow,
the kinds and their counts. Put it behind the network's own access rules where kinds'
names or volumes are not for everyone."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import Response
from prometheus_client import CONTENT_TYPE_LATEST, REGISTRY, generate_latest

from app import errors
from app.api.deps import Db, JobQueue, Runtime
from app.services import gauges

router = APIRouter()


@router.get("/metrics", include_in_schema=False)
async def metrics(request: Request, db: Db, queue: JobQueue) -> Response:
    """This process's counters and histograms, and the deployment's jobs by state and
    kind, oldest queued age and DLQ depth (read at most once a second). Not behind API
    Gateway: there the figures go to CloudWatch as EMF, and a route without a key would
    be public."""
    runtime: Runtime = request.app.state.runtime
    if not runtime.serve_metrics:
        raise errors.NotFound("no /metrics here: on Lambda the metrics go to CloudWatch (EMF)")
    await gauges.refresh(db, queue)
    return Response(generate_latest(REGISTRY), media_type=CONTENT_TYPE_LATEST)
