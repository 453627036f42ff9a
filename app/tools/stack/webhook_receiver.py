"""A local webhook receiver: records every delivery with its Idempotency-Key, so a
duplicate delivery is visible and countable. Started by ``tasklease dev`` and the tests.

``POST /alerts`` takes tasklease's alerts (docs/howto/alerts.md) and keeps each as it came:
the raw body and the Standard Webhooks headers, so a test verifies the signature itself.
``?fail=N`` answers 503 to the first N deliveries of each webhook-id (a receiver that
fails, then recovers). ``GET /alerts`` lists them, with the ids delivered more than once.
"""

from __future__ import annotations

import datetime as dt
import json
from collections import Counter
from pathlib import Path
from typing import Any

from fastapi import FastAPI, Request, Response


def create_app(log_path: Path | None = None) -> FastAPI:
    app = FastAPI(title="tasklease webhook receiver")
    deliveries: list[dict[str, Any]] = []

    @app.post("/hook", status_code=200)
    async def hook(request: Request) -> dict[str, Any]:
        body = await request.json()
        entry = {
            "at": dt.datetime.now(dt.UTC).isoformat(),
            "idempotency_key": request.headers.get("idempotency-key"),
            "body": body,
        }
        deliveries.append(entry)
        if log_path is not None:
            with log_path.open("a") as fh:
                fh.write(json.dumps(entry) + "\n")
        return {"received": len(deliveries)}

    alerts: list[dict[str, Any]] = []

    @app.post("/alerts")
    async def alert(request: Request, fail: int = 0) -> Response:
        raw = await request.body()
        msg_id = request.headers.get("webhook-id")
        seen = sum(1 for a in alerts if a["webhook_id"] == msg_id)
        refused = seen < fail and msg_id is not None
        alerts.append(
            {
                "at": dt.datetime.now(dt.UTC).isoformat(),
                "webhook_id": msg_id,
                "headers": {k: v for k, v in request.headers.items() if k.startswith("webhook-")},
                "raw": raw.decode(errors="replace"),
                "answered": 503 if refused else 200,
            }
        )
        return Response(status_code=503 if refused else 200)

    @app.get("/alerts")
    async def alert_listing() -> dict[str, Any]:
        taken = Counter(str(a["webhook_id"]) for a in alerts if a["answered"] == 200)
        return {
            "count": len(alerts),
            "alerts": alerts,
            "taken_by_id": dict(taken),
            "taken_twice": sorted(k for k, n in taken.items() if n > 1),
        }

    @app.get("/deliveries")
    async def listing() -> dict[str, Any]:
        by_key = Counter(str(d["idempotency_key"]) for d in deliveries)
        return {
            "count": len(deliveries),
            "by_key": dict(by_key),
            "duplicated_keys": sorted(k for k, n in by_key.items() if n > 1),
            "deliveries": deliveries,
        }

    return app
