"""/v1/alerts: the alerts sent (a tenant key sees its own tenant's; an admin key every
tenant's and the deployment's), and the tenants' own alert webhooks (admin only).
docs/howto/alerts.md."""

from __future__ import annotations

import datetime as dt
import uuid
from typing import Annotated, Any

from fastapi import APIRouter, Path, Query
from pydantic import BaseModel, ConfigDict, Field

from app.api.deps import Db
from app.api.errors import COMMON, UNPARSEABLE
from app.api.schemas import TENANT_PATTERN, Problem, Storable
from app.api.security import Admin, Caller, TenantScope
from app.services import alerts
from app.settings import bounds

router = APIRouter()

ADMIN_ONLY: dict[int | str, dict[str, Any]] = {
    403: {"model": Problem, "description": "not an admin key"},
    **COMMON,
}
TenantPath = Annotated[str, Path(pattern=TENANT_PATTERN, description="the tenant")]


class AlertPublic(BaseModel):
    id: str = Field(description="the alert's key: the webhook-id of every delivery of it")
    type: str
    tenant: str | None = Field(description="null: a deployment-wide alert (admins only)")
    job_id: uuid.UUID | None
    detail: dict[str, Any]
    created_at: dt.datetime
    delivered: list[str] = Field(description="the destinations that took it")
    delivered_at: dt.datetime | None
    attempts: int
    next_attempt_at: dt.datetime | None
    last_error: str | None
    given_up_at: dt.datetime | None

    @classmethod
    def of(cls, row: dict[str, Any], *, admin: bool) -> AlertPublic:
        """The alert as the caller may see it: a tenant key sees only what concerns its own
        webhook (the deployment's destinations and their errors, which may name their
        URLs, are the operators')."""
        shown = alerts.tenant_view(row) if not admin else row
        return cls(**{**shown, "id": row["dedup_key"], "delivered": list(shown["delivered"])})


class WebhookRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    url: Annotated[str, Storable] = Field(max_length=2000, description="an http:// or https:// URL")
    secret: Annotated[str | None, Storable] = Field(
        None,
        max_length=200,
        description="whsec_ then base64 of 24 to 64 bytes; omitted: one is made and answered once",
    )


class WebhookPublic(BaseModel):
    tenant: str
    url: str
    secret: str | None = Field(
        None, description="the secret made for it (shown this once); null when you gave one"
    )


class WebhookListed(BaseModel):
    tenant: str
    url: str
    created_at: dt.datetime
    updated_at: dt.datetime


@router.get(
    "/v1/alerts",
    response_model=list[AlertPublic],
    responses={
        403: {"model": Problem, "description": "a tenant key naming another tenant"},
        **COMMON,
    },
)
async def list_alerts(
    db: Db,
    scope: TenantScope,
    caller: Caller,
    type: Annotated[
        str | None, Query(max_length=100, description="one alert type"), Storable
    ] = None,
    limit: Annotated[int, Query(ge=1, le=bounds.MAX_PAGE)] = 50,
) -> list[AlertPublic]:
    """The newest alerts first, with where each was delivered: the caller's tenant's; an
    admin key sees every tenant's and the deployment-wide ones (or one tenant's)."""
    rows = await alerts.list_alerts(db, scope=scope, type_=type, limit=limit)
    return [AlertPublic.of(r, admin=caller.admin) for r in rows]


@router.get("/v1/alerts/webhooks", response_model=list[WebhookListed], responses=ADMIN_ONLY)
async def list_webhooks(db: Db, caller: Admin) -> list[WebhookListed]:
    """Admin: the tenants' alert webhooks (never their secrets)."""
    return [WebhookListed.model_validate(r) for r in await alerts.tenant_webhooks(db)]


@router.put(
    "/v1/alerts/webhooks/{tenant}",
    response_model=WebhookPublic,
    responses={**UNPARSEABLE, **ADMIN_ONLY},
)
async def set_webhook(
    tenant: TenantPath, body: WebhookRequest, db: Db, caller: Admin
) -> WebhookPublic:
    """Admin: where a tenant's own alerts go too (a job of its dead-lettered or stalled, its
    token budget used up), signed with its secret."""
    hook = await alerts.set_tenant_webhook(db, tenant, body.url, body.secret)
    return WebhookPublic(tenant=hook.tenant, url=hook.url, secret=hook.secret)


@router.delete("/v1/alerts/webhooks/{tenant}", status_code=204, responses=ADMIN_ONLY)
async def clear_webhook(tenant: TenantPath, db: Db, caller: Admin) -> None:
    """Admin: the tenant's alerts go to the deployment's destinations only again."""
    await alerts.clear_tenant_webhook(db, tenant)
