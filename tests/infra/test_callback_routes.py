"""The callback routes (their token is the credential) are open in API Gateway in every
api_auth_mode, and they are exactly the routes the app serves without a key."""

from __future__ import annotations

import pytest

from app.api import create_app
from app.settings import config
from tests.infra import tfconfig

pytestmark = pytest.mark.unit


def test_the_open_routes_are_the_apps_callback_routes_and_take_no_authorizer() -> None:
    app = create_app(
        config.load(database_url="postgresql://unused/x", queue_url="http://q", dlq_url="http://d")
    )
    served = {
        f"{method.upper()} {path}"
        for path, operations in app.openapi()["paths"].items()
        if path.startswith("/v1/callbacks")
        for method in operations
    }
    assert tfconfig.locals_()["callback_routes"] == sorted(served)
    route = tfconfig.resources()[("aws_apigatewayv2_route", "callbacks")]
    assert tfconfig.expr(route["for_each"]) == "toset(local.callback_routes)"
    assert route["authorization_type"] == "NONE"
    assert "authorizer_id" not in route
    assert tfconfig.expr(route["target"]) == "integrations/${aws_apigatewayv2_integration.api.id}"
    assert any(c.startswith("checkov:skip=CKV_AWS_309:") for c in tfconfig.comments(route))
