"""A local webhook receiver: records every delivery with its Idempotency-Key, so a
duplicate delivery is visible and countable. Started by ``tasklease dev`` and the tests.
"""

from __future__ import annotations

import datetime as dt
import json
from collections import Counter
from pathlib import Path
from typing import Any

from fastapi import FastAPI, Request


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
