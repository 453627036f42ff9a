"""Who is calling: the principal every /v1 route depends on.

A tenant's API key (``Authorization: Bearer tlk_…``), or with TASKLEASE_AUTH_MODE=
authorizer the identity API Gateway's authorizer put in the request context. A missing
or bad key raises auth.Unauthorized, which app/api/errors.py answers with 401 and
WWW-Authenticate; a route for admins only raises auth.Forbidden (403). More than one
Authorization header is 400 (RFC 6750 §3.1 invalid_request), whichever of them is good:
a proxy or a log that reads another one than the API would disagree about the caller.
"""

from __future__ import annotations

import dataclasses
from typing import Annotated

from fastapi import Depends, HTTPException, Query, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from app.api.deps import Keys, Runtime, Settings, client_keys, runtime_of
from app.api.schemas import TENANT_PATTERN
from app.services import auth

# Declares the scheme in the OpenAPI document; _identify does the checking itself, so a
# missing or bad key is our 401 with WWW-Authenticate, not the library's answer.
_bearer = HTTPBearer(auto_error=False, description="A tenant's API key: tlk_<id>_<secret>")

Credentials = Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)]

# The OpenAPI "security" of a route that checks the key without the _bearer dependency
# (the submit routes, the hot path): the same scheme, named as FastAPI names it.
SUBMIT_SECURITY: dict[str, object] = {"security": [{_bearer.scheme_name: []}]}


async def _identify(
    request: Request,
    settings: Settings,
    keys: Keys,
    credentials: Credentials,
    *,
    defer_revocation: bool,
) -> tuple[auth.Principal, str]:
    """The caller, and the key it presented ("" under an authorizer)."""
    if settings.auth_mode == "authorizer":
        principal = auth.from_authorizer(
            request.scope.get("aws.event"),
            tenant_field=settings.authorizer_tenant_field,
            admin_field=settings.authorizer_admin_field,
        )
        return principal, ""
    _one_credential(request)
    # HTTPBearer hands over only a well-formed "Bearer <token>"; anything else is None.
    header = request.headers.get("authorization")
    token = credentials.credentials if credentials else auth.bearer(header)
    return await keys.verify(token, defer_revocation=defer_revocation), token


def _one_credential(request: Request) -> None:
    """400 for two Authorization headers, or two joined with a comma in one (how API
    Gateway's HTTP API hands repeated headers to Mangum). A key never holds a comma."""
    sent = request.headers.getlist("authorization")
    if len(sent) > 1 or any("," in value for value in sent):
        raise HTTPException(
            400,
            "more than one Authorization header: send exactly one 'Bearer <key>'",
            headers={"WWW-Authenticate": 'Bearer realm="tasklease", error="invalid_request"'},
        )


async def _caller(
    request: Request, settings: Settings, keys: Keys, credentials: Credentials
) -> auth.Principal:
    principal, _ = await _identify(request, settings, keys, credentials, defer_revocation=False)
    return principal


@dataclasses.dataclass(frozen=True)
class Submitting:
    """The caller of a submit route and the API's clients, in one dependency (each
    dependency costs FastAPI work on every request, and submitting is the hot path)."""

    caller: auth.Principal
    runtime: Runtime


# Where a submit request keeps the key it was let in with unread (request.state).
_DEFERRED = "deferred_key"


async def _submitting(request: Request) -> Submitting:
    """The caller of a submit route. A key this process verified before is taken from
    memory and its revocation is read by the insert itself (one round trip fewer per
    submission). Should the request fail before that statement ran (a body that does
    not validate, a bad job), ``verify_deferred`` reads the key first, so a revoked key
    still gets 401: the routes call it on any error, app/api/errors.py on a 422.

    It takes the request alone, no dependencies of its own: FastAPI solves each one on
    every request, and on the submit path that was a third of the request's time. The
    routes name the bearer scheme in the OpenAPI document with ``SUBMIT_SECURITY``."""
    runtime = await runtime_of(request)
    keys = client_keys(request, runtime)
    principal, token = await _identify(request, runtime.settings, keys, None, defer_revocation=True)
    if principal.revocation_pending:
        setattr(request.state, _DEFERRED, (keys, token))
    return Submitting(principal, runtime)


async def verify_deferred(request: Request) -> None:
    """Unauthorized for a key revoked since this process verified it, when this request
    let it in from memory (a no-op otherwise)."""
    deferred: tuple[auth.ClientKeys, str] | None = getattr(request.state, _DEFERRED, None)
    if deferred is not None:
        keys, token = deferred
        await keys.verify(token)


async def _admin(caller: Annotated[auth.Principal, Depends(_caller)]) -> auth.Principal:
    if not caller.admin:
        raise auth.Forbidden()
    return caller


Caller = Annotated[auth.Principal, Depends(_caller)]
Submitter = Annotated[Submitting, Depends(_submitting)]
Admin = Annotated[auth.Principal, Depends(_admin)]


TenantQuery = Annotated[
    str | None,
    Query(
        pattern=TENANT_PATTERN,
        description="only this tenant's: a tenant key may name its own tenant (another is "
        "403), an admin key any",
    ),
]


async def _tenant_scope(caller: Caller, tenant: TenantQuery = None) -> str | None:
    """The tenant a read covers: the caller's own (an admin's: every tenant, None), or
    ``tenant`` when it names one; a tenant key naming another tenant is 403."""
    if tenant is None:
        return caller.scope
    if not caller.admin and tenant != caller.tenant:
        raise auth.Forbidden("a tenant key sees only its own tenant")
    return tenant


# ``?tenant=`` on a route that lists or counts (issue 30, item 13: every such route
# alike): the tenant the route covers, None for every tenant (an admin without a filter).
TenantScope = Annotated[str | None, Depends(_tenant_scope)]
