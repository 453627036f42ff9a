"""Lambda entry point that applies the migrations (the database is private on AWS).

Invoke it once after each deploy: `aws lambda invoke --function-name <prefix>-migrate out.json`.
Safe to run concurrently and again: applied migrations are skipped.
"""

from __future__ import annotations

from typing import Any

from app import config, db, logs
from handlers import runtime

settings = config.load()
settings.need("database_url")
logs.setup(settings.log_level)


def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    applied = runtime.run(lambda: db.migrate(settings.database))
    return {"applied": applied}
