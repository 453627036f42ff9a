"""The HTTP API (FastAPI), versioned under /v1. handlers/api.py serves it through Mangum.

Every /v1 route needs a caller: a tenant's API key (``Authorization: Bearer tlk_…``)
or, with TASKLEASE_AUTH_MODE=authorizer, the identity API Gateway's authorizer put in
the request context. A caller sees its own tenant's jobs; another tenant's job is 404.
An admin key sees every tenant (dead letters across tenants, redrive).

  app.py        create_app: the runtime, its lifespan, the routers, middleware, errors
  deps.py       the runtime's clients as dependencies (Db, JobQueue, Sender, ...)
  security.py   the caller as a dependency (Caller, Submitter, Admin)
  schemas.py    request and response bodies
  errors.py     errors as HTTP answers, and the answers the document lists
  middleware.py the body size limit (413)
  routes/       one APIRouter per resource
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from app.api.app import create_app


def __getattr__(name: str) -> Any:
    # create_app on first use: importing a module of this package (the CLI reads
    # app.api.schemas) does not build FastAPI and every route (0.65 s of each command's
    # start-up).
    if name == "create_app":
        from app.api.app import create_app

        return create_app
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["create_app"]

__all__ = ["create_app"]
