# HTTP API (v2) -> the API function, Lambda proxy integration with payload 2.0
# (the shape Mangum and tests/events/apigw_v2_*.json use).

resource "aws_apigatewayv2_api" "http" {
  name          = "${var.name}-api"
  description   = "tasklease: POST /v1/jobs answers 202; the work runs later"
  protocol_type = "HTTP"
}

resource "aws_apigatewayv2_integration" "api" {
  api_id                 = aws_apigatewayv2_api.http.id
  integration_type       = "AWS_PROXY"
  integration_method     = "POST"
  integration_uri        = aws_lambda_function.fn["api"].invoke_arn
  payload_format_version = "2.0"
  timeout_milliseconds   = 30000
}

# Who may call (var.api_auth_mode; infra/README.md, "Authentication"): the route's
# authorization and what the API function is told to trust (app/settings/config.py auth_mode,
# authorizer_tenant_field and authorizer_admin_field: dotted paths under
# requestContext.authorizer of the payload 2.0 event).
locals {
  api_auth = {
    # The route is open; the app checks `Authorization: Bearer tlk_<id>_<secret>`
    # against the hashed keys in PostgreSQL on every /v1 request.
    api_key = {
      route_authorization_type = "NONE"
      env                      = { TASKLEASE_AUTH_MODE = "api_key" }
    }
    # API Gateway validates the token; the app reads the tenant from a claim.
    jwt = {
      route_authorization_type = "JWT"
      env = {
        TASKLEASE_AUTH_MODE               = "authorizer"
        TASKLEASE_AUTHORIZER_TENANT_FIELD = "jwt.claims.${var.jwt_tenant_claim}"
        # Empty: no admin field, so no caller is an admin through the API.
        TASKLEASE_AUTHORIZER_ADMIN_FIELD = var.jwt_admin_claim == null ? "" : "jwt.claims.${var.jwt_admin_claim}"
      }
    }
    # The operator's authorizer returns {"isAuthorized", "context": {"tenant", "admin"}}.
    lambda = {
      route_authorization_type = "CUSTOM"
      env = {
        TASKLEASE_AUTH_MODE               = "authorizer"
        TASKLEASE_AUTHORIZER_TENANT_FIELD = "lambda.tenant"
        TASKLEASE_AUTHORIZER_ADMIN_FIELD  = "lambda.admin"
      }
    }
  }

  # arn:<partition>:lambda:<region>:<account>:function:<name>[:<qualifier>]
  lambda_authorizer_arn_parts = var.lambda_authorizer_function_arn == null ? [] : split(":", var.lambda_authorizer_function_arn)
}

resource "aws_apigatewayv2_authorizer" "jwt" {
  count = var.api_auth_mode == "jwt" ? 1 : 0

  api_id           = aws_apigatewayv2_api.http.id
  name             = "${var.name}-jwt"
  authorizer_type  = "JWT"
  identity_sources = ["$request.header.Authorization"]

  jwt_configuration {
    issuer   = var.jwt_issuer
    audience = var.jwt_audience
  }
}

resource "aws_apigatewayv2_authorizer" "lambda" {
  count = var.api_auth_mode == "lambda" ? 1 : 0

  api_id                            = aws_apigatewayv2_api.http.id
  name                              = "${var.name}-lambda"
  authorizer_type                   = "REQUEST"
  authorizer_uri                    = "arn:${data.aws_partition.current.partition}:apigateway:${var.aws_region}:lambda:path/2015-03-31/functions/${var.lambda_authorizer_function_arn}/invocations"
  authorizer_payload_format_version = "2.0"
  enable_simple_responses           = true
  identity_sources                  = var.lambda_authorizer_identity_sources
  authorizer_result_ttl_in_seconds  = var.lambda_authorizer_cache_seconds
}

# API Gateway may invoke the operator's authorizer, for this API's authorizer only.
resource "aws_lambda_permission" "authorizer" {
  count = var.api_auth_mode == "lambda" ? 1 : 0

  statement_id  = "AllowHttpApiAuthorizer-${var.name}"
  action        = "lambda:InvokeFunction"
  function_name = join(":", slice(local.lambda_authorizer_arn_parts, 0, 7))
  qualifier     = length(local.lambda_authorizer_arn_parts) > 7 ? local.lambda_authorizer_arn_parts[7] : null
  principal     = "apigateway.amazonaws.com"
  source_arn    = "${aws_apigatewayv2_api.http.execution_arn}/authorizers/${aws_apigatewayv2_authorizer.lambda[0].id}"
}

# One catch-all route: FastAPI does the routing (and answers 404 itself).
resource "aws_apigatewayv2_route" "default" {
  #checkov:skip=CKV_AWS_309:with api_auth_mode = api_key (the default) the route is open on purpose: the app itself checks every /v1 request's Bearer key against salted hashes in PostgreSQL (SigV4 would take the Authorization header and carry no tenant); jwt and lambda attach an authorizer
  api_id             = aws_apigatewayv2_api.http.id
  route_key          = "$default"
  target             = "integrations/${aws_apigatewayv2_integration.api.id}"
  authorization_type = local.api_auth[var.api_auth_mode].route_authorization_type
  authorizer_id = (
    var.api_auth_mode == "jwt" ? aws_apigatewayv2_authorizer.jwt[0].id :
    var.api_auth_mode == "lambda" ? aws_apigatewayv2_authorizer.lambda[0].id : null
  )
}

# The callback routes take no API key and no authorizer, whatever api_auth_mode says: the
# token in the path is their credential (like Step Functions' task tokens), handed to an
# outside party (a person, a tool's webhook) that has no tenant's key. The app answers
# them without the key check (app/api/routes/callbacks.py); an unknown or expired token
# is 404. More specific than $default, so API Gateway picks these for the two paths.
resource "aws_apigatewayv2_route" "callbacks" {
  #checkov:skip=CKV_AWS_309:open on purpose in every api_auth_mode: the callback token in the path is the credential (a 256-bit HMAC only its hash is stored of); an authorizer would ask the outside party for a key it does not have
  for_each = toset(local.callback_routes)

  api_id             = aws_apigatewayv2_api.http.id
  route_key          = each.value
  target             = "integrations/${aws_apigatewayv2_integration.api.id}"
  authorization_type = "NONE"
}

locals {
  callback_routes = ["POST /v1/callbacks/{token}", "POST /v1/callbacks/{token}/heartbeat"]
}

resource "aws_cloudwatch_log_group" "api_access" {
  #checkov:skip=CKV_AWS_158:encrypted by CloudWatch Logs' own key; a customer-managed KMS key needs an account-specific key policy, left to the operator (infra/README.md)
  name              = "/aws/apigateway/${var.name}-api"
  retention_in_days = var.log_retention_days
}

resource "aws_apigatewayv2_stage" "default" {
  api_id      = aws_apigatewayv2_api.http.id
  name        = "$default"
  auto_deploy = true

  default_route_settings {
    throttling_rate_limit  = var.api_throttle_rate_limit
    throttling_burst_limit = var.api_throttle_burst_limit
  }

  access_log_settings {
    destination_arn = aws_cloudwatch_log_group.api_access.arn
    format = jsonencode({
      requestId          = "$context.requestId"
      ip                 = "$context.identity.sourceIp"
      requestTime        = "$context.requestTime"
      httpMethod         = "$context.httpMethod"
      path               = "$context.path"
      status             = "$context.status"
      responseLength     = "$context.responseLength"
      integrationError   = "$context.integrationErrorMessage"
      integrationLatency = "$context.integrationLatency"
    })
  }
}

resource "aws_lambda_permission" "api_gateway" {
  statement_id  = "AllowHttpApiInvoke"
  action        = "lambda:InvokeFunction"
  function_name = aws_lambda_function.fn["api"].function_name
  principal     = "apigateway.amazonaws.com"
  source_arn    = "${aws_apigatewayv2_api.http.execution_arn}/*/*"
}
