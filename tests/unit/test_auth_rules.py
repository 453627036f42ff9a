"""app.auth without I/O: the shape of a key, the Authorization header, tenant names, and
the identity API Gateway's authorizer puts in the request context."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from app import errors
from app.services import auth

pytestmark = pytest.mark.unit

KEY_ID = "0123456789ab"
SECRET = "s3cr3t-" + "x" * 36  # token_urlsafe(32) is 43 characters of [A-Za-z0-9_-]


# --- split_key ----------------------------------------------------------------------


def test_split_key_returns_the_public_id_and_the_secret() -> None:
    assert auth.split_key(f"tlk_{KEY_ID}_{SECRET}") == (KEY_ID, SECRET)


def test_split_key_keeps_underscores_inside_the_secret() -> None:
    """token_urlsafe may put '_' in the secret: only the first two separate the parts."""
    secret = "_abc_def_ghi_jkl_mno_"
    assert auth.split_key(f"tlk_{KEY_ID}_{secret}") == (KEY_ID, secret)


def test_split_key_accepts_a_secret_of_exactly_sixteen_characters() -> None:
    assert auth.split_key(f"tlk_{KEY_ID}_{'a' * 16}") == (KEY_ID, "a" * 16)


@pytest.mark.parametrize(
    "key",
    [
        "",
        "tlk",
        "tlk_",
        f"tlk_{KEY_ID}",
        f"tlk_{KEY_ID}_",
        f"tlk_{KEY_ID}_{'a' * 15}",  # secret too short
        f"TLK_{KEY_ID}_{SECRET}",  # the prefix is case-sensitive
        f"sk_{KEY_ID}_{SECRET}",
        f"tlk_{KEY_ID.upper()}_{SECRET}",  # ids are lower-case hex
        f"tlk_{KEY_ID[:-1]}_{SECRET}",  # 11 characters
        f"tlk_{KEY_ID}0_{SECRET}",  # 13 characters
        f"tlk_0123456789ag_{SECRET}",  # not hex
        f"tlk_{KEY_ID}\n_{SECRET}",  # '$' in a Python regex would let a trailing newline through
        f"tlk__{KEY_ID}_{SECRET}",
        f" tlk_{KEY_ID}_{SECRET}",
        "Bearer tlk_0123456789ab_" + SECRET,
    ],
)
def test_split_key_refuses_anything_not_shaped_like_our_keys_as_invalid_token(key: str) -> None:
    with pytest.raises(auth.Unauthorized) as caught:
        auth.split_key(key)
    assert caught.value.error == "invalid_token"
    # The answer never echoes what was sent.
    assert SECRET not in str(caught.value)


# --- bearer ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("header", "token"),
    [
        ("Bearer abc", "abc"),
        ("bearer abc", "abc"),  # RFC 7235 §2.1: the scheme is case-insensitive
        ("BEARER abc", "abc"),
        ("  Bearer   abc  ", "abc"),
        (f"Bearer tlk_{KEY_ID}_{SECRET}", f"tlk_{KEY_ID}_{SECRET}"),
    ],
)
def test_bearer_returns_the_token(header: str, token: str) -> None:
    assert auth.bearer(header) == token


@pytest.mark.parametrize("header", [None, ""])
def test_no_authorization_header_is_401_without_an_error_code(header: str | None) -> None:
    """RFC 6750 §3.1: a request with no authentication information gets no error code."""
    with pytest.raises(auth.Unauthorized) as caught:
        auth.bearer(header)
    assert caught.value.error is None
    assert "Bearer" in str(caught.value)


@pytest.mark.parametrize(
    "header",
    ["Basic dXNlcjpwYXNz", "Bearer", "Bearer   ", "Token abc", "tlk_0123456789ab_secret", "   "],
)
def test_an_authorization_header_that_is_not_bearer_is_invalid_request(header: str) -> None:
    with pytest.raises(auth.Unauthorized) as caught:
        auth.bearer(header)
    assert caught.value.error == "invalid_request"
    assert "Bearer <key>" in str(caught.value)


# --- check_tenant ---------------------------------------------------------------------


@pytest.mark.parametrize("tenant", ["a", "7", "acme", "Acme.Corp_eu-1", "a" * 63])
def test_check_tenant_accepts_names_of_1_to_63_safe_characters(tenant: str) -> None:
    assert auth.check_tenant(tenant) == tenant


@pytest.mark.parametrize(
    "tenant",
    [
        "",
        "a" * 64,
        "-acme",
        ".acme",
        "_acme",
        "ac me",
        "acme/../globex",
        "acme%",
        "acmé",
        "acme\n",  # '$' matches before a trailing newline; the database's CHECK does not
        "\nacme",
        "acme\x00",
    ],
)
def test_check_tenant_refuses_other_names_with_the_rule_in_the_message(tenant: str) -> None:
    with pytest.raises(errors.BadRequest) as caught:
        auth.check_tenant(tenant)
    assert "1 to 63 letters, digits" in str(caught.value)


# --- Principal --------------------------------------------------------------------------


def test_a_tenant_caller_is_scoped_to_its_tenant_and_an_admin_to_none() -> None:
    assert auth.Principal(tenant="acme").scope == "acme"
    assert auth.Principal(tenant="ops", admin=True).scope is None


# --- from_authorizer -------------------------------------------------------------------

# API Gateway HTTP API (payload v2) request contexts, as AWS sends them to the integration.
LAMBDA_AUTHORIZER: dict[str, Any] = {
    "requestContext": {
        "accountId": "123456789012",
        "apiId": "r3pmxmplak",
        "authorizer": {"lambda": {"tenant": "globex", "admin": False}},
        "http": {"method": "POST", "path": "/v1/jobs"},
        "requestId": "JKJaXmPLvHcESHB=",
        "routeKey": "$default",
        "stage": "$default",
    }
}
# A JWT authorizer passes the token's claims as strings.
JWT_AUTHORIZER: dict[str, Any] = {
    "requestContext": {
        "accountId": "123456789012",
        "apiId": "r3pmxmplak",
        "authorizer": {
            "jwt": {
                "claims": {
                    "iss": "https://cognito-idp.us-east-1.amazonaws.com/us-east-1_example",
                    "sub": "5f4d1a2b-0000-4000-8000-000000000000",
                    "tenant": "initech",
                    "admin": "false",
                },
                "scopes": ["jobs/write"],
            }
        },
        "http": {"method": "POST", "path": "/v1/jobs"},
        "requestId": "JKJaXmPLvHcESHC=",
        "routeKey": "$default",
        "stage": "$default",
    }
}


def lambda_ctx(**context: Any) -> dict[str, Any]:
    event = copy.deepcopy(LAMBDA_AUTHORIZER)
    event["requestContext"]["authorizer"]["lambda"] = context
    return event


def jwt_claims(**claims: Any) -> dict[str, Any]:
    event = copy.deepcopy(JWT_AUTHORIZER)
    event["requestContext"]["authorizer"]["jwt"]["claims"].update(claims)
    return event


def test_a_lambda_authorizer_context_names_the_tenant() -> None:
    who = auth.from_authorizer(
        LAMBDA_AUTHORIZER, tenant_field="lambda.tenant", admin_field="lambda.admin"
    )
    assert who == auth.Principal(tenant="globex", admin=False, key_id=None, via="authorizer")
    assert who.scope == "globex"


def test_a_jwt_authorizer_claim_names_the_tenant() -> None:
    who = auth.from_authorizer(
        JWT_AUTHORIZER, tenant_field="jwt.claims.tenant", admin_field="jwt.claims.admin"
    )
    assert who == auth.Principal(tenant="initech", admin=False, via="authorizer")


@pytest.mark.parametrize(
    ("value", "admin"),
    [
        ("true", True),
        ("True", True),
        ("1", True),
        ("yes", True),
        ("false", False),
        ("0", False),
        ("", False),
        ("admin", False),
    ],
)
def test_a_jwt_admin_claim_is_a_string_read_as_a_flag(value: str, admin: bool) -> None:
    who = auth.from_authorizer(
        jwt_claims(admin=value), tenant_field="jwt.claims.tenant", admin_field="jwt.claims.admin"
    )
    assert who.admin is admin


@pytest.mark.parametrize(
    ("value", "admin"),
    [(True, True), (False, False), (1, False), ("true", True), (None, False), ({}, False)],
)
def test_a_lambda_admin_flag_must_be_true_itself_or_a_true_string(value: Any, admin: bool) -> None:
    who = auth.from_authorizer(
        lambda_ctx(tenant="globex", admin=value),
        tenant_field="lambda.tenant",
        admin_field="lambda.admin",
    )
    assert who.admin is admin


def test_no_admin_field_configured_means_never_admin() -> None:
    who = auth.from_authorizer(
        lambda_ctx(tenant="globex", admin=True), tenant_field="lambda.tenant", admin_field=None
    )
    assert who.admin is False


def test_a_missing_admin_field_means_not_admin() -> None:
    who = auth.from_authorizer(
        lambda_ctx(tenant="globex"), tenant_field="lambda.tenant", admin_field="lambda.admin"
    )
    assert who.admin is False


def test_the_tenant_field_is_read_only_where_configured() -> None:
    """A JWT deployment does not read a tenant a Lambda-shaped context would carry."""
    event = copy.deepcopy(JWT_AUTHORIZER)
    event["requestContext"]["authorizer"]["lambda"] = {"tenant": "globex"}
    who = auth.from_authorizer(event, tenant_field="jwt.claims.tenant", admin_field=None)
    assert who.tenant == "initech"


def without_authorizer() -> dict[str, Any]:
    event = copy.deepcopy(LAMBDA_AUTHORIZER)
    del event["requestContext"]["authorizer"]
    return event


@pytest.mark.parametrize(
    ("event", "tenant_field"),
    [
        (None, "lambda.tenant"),  # not behind API Gateway at all
        ({}, "lambda.tenant"),
        ({"requestContext": None}, "lambda.tenant"),
        (without_authorizer(), "lambda.tenant"),
        ({"requestContext": {"authorizer": ["globex"]}}, "lambda.tenant"),
        ({"requestContext": {"authorizer": {"lambda": "globex"}}}, "lambda.tenant"),
        (lambda_ctx(admin=True), "lambda.tenant"),  # no tenant in the context
        (lambda_ctx(tenant=42), "lambda.tenant"),
        (lambda_ctx(tenant=""), "lambda.tenant"),
        (lambda_ctx(tenant="../globex"), "lambda.tenant"),
        (lambda_ctx(tenant="globex\n"), "lambda.tenant"),
        (lambda_ctx(tenant={"name": "globex"}), "lambda.tenant"),
        (jwt_claims(tenant="a" * 64), "jwt.claims.tenant"),
        (JWT_AUTHORIZER, "lambda.tenant"),  # the wrong kind of authorizer for the setting
        (LAMBDA_AUTHORIZER, "jwt.claims.tenant"),
    ],
)
def test_no_valid_tenant_from_the_authorizer_is_401(event: Any, tenant_field: str) -> None:
    with pytest.raises(auth.Unauthorized):
        auth.from_authorizer(event, tenant_field=tenant_field, admin_field="lambda.admin")


def test_a_bearer_header_in_the_event_is_not_an_identity_in_authorizer_mode() -> None:
    event = without_authorizer()
    event["headers"] = {"authorization": f"Bearer tlk_{KEY_ID}_{SECRET}"}
    with pytest.raises(auth.Unauthorized) as caught:
        auth.from_authorizer(event, tenant_field="lambda.tenant", admin_field="lambda.admin")
    assert "lambda.tenant" in str(caught.value)
