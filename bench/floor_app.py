"""The single-submission floor (issue 18): a bare FastAPI app with one route that does
one INSERT per request into a plain table, and nothing else: no queue, no outbox, no
auth, no middleware, no metrics, no tracing.

Served the way ``tasklease api`` serves tasklease's API (app/cli/serve.py): one uvicorn
process, ``uvicorn.run(app, host=..., port=..., log_config=None, access_log=False)``,
so the same loop (uvloop where installed) and HTTP implementation (httptools where
installed), both uvicorn's "auto" picks. Its pool is a psycopg AsyncConnectionPool in
autocommit with the API's sizes (app/store/pool.py), its statement prepared.

``python -m bench.floor_app DATABASE_URL PORT POOL_MIN POOL_MAX``
"""

from __future__ import annotations

import contextlib
import sys
import uuid
from collections.abc import AsyncIterator
from typing import Any

import uvicorn
from fastapi import Body, FastAPI
from psycopg.types.json import Jsonb
from psycopg_pool import AsyncConnectionPool

TABLE = "bench_floor_jobs"
SCHEMA = f"""
CREATE TABLE IF NOT EXISTS {TABLE} (
    id uuid PRIMARY KEY, kind text NOT NULL, payload jsonb NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now())"""
INSERT = f"INSERT INTO {TABLE} (id, kind, payload) VALUES (%s, %s, %s)"  # noqa: S608 - a constant


def create_app(url: str, min_size: int, max_size: int) -> FastAPI:
    pool: AsyncConnectionPool[Any] = AsyncConnectionPool(
        url, min_size=min_size, max_size=max_size, open=False, kwargs={"autocommit": True}
    )

    @contextlib.asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        await pool.open(wait=True, timeout=30)
        async with pool.connection() as conn:
            await conn.execute(SCHEMA)
        try:
            yield
        finally:
            await pool.close()

    app = FastAPI(lifespan=lifespan, openapi_url=None)

    @app.get("/healthz")
    async def healthz() -> dict[str, str]:
        return {"status": "ok"}

    @app.post("/v1/jobs", status_code=202)
    async def create_job(body: dict[str, Any] = Body(...)) -> dict[str, str]:  # noqa: B008
        job_id = uuid.uuid4()
        async with pool.connection() as conn:
            await conn.execute(
                INSERT,
                (job_id, str(body.get("kind", "")), Jsonb(body.get("payload"))),
                prepare=True,
            )
        return {"id": str(job_id)}

    return app


def main(argv: list[str]) -> None:
    url, port, min_size, max_size = argv[0], int(argv[1]), int(argv[2]), int(argv[3])
    # The same call as app/cli/serve.py's api(): the same server settings.
    uvicorn.run(
        create_app(url, min_size, max_size),
        host="127.0.0.1",
        port=port,
        log_config=None,
        access_log=False,
    )


if __name__ == "__main__":
    main(sys.argv[1:])
