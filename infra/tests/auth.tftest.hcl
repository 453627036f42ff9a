# `terraform test` (run by tests/infra/test_terraform_parses.py when terraform is
# installed and infra/ is initialised): each api_auth_mode planned against a mock
# AWS provider, so no credentials and no API call. What it checks: the route's
# authorization, which authorizer exists, what the API function is told to trust,
# and that the variable validations refuse incomplete or unsupported settings.

mock_provider "aws" {
  source = "./tests/mocks"
}

variables {
  # The plan only hashes the package: a stand-in with its manifest (package.tftest.hcl).
  lambda_package_path = "tests/packages/arm64-python3.13.zip"
}

run "api_key_is_the_default_and_the_app_checks_the_keys" {
  command = plan

  assert {
    condition     = aws_apigatewayv2_route.default.authorization_type == "NONE" && aws_apigatewayv2_route.default.authorizer_id == null
    error_message = "api_key: the route must be open (the app checks the Bearer keys)."
  }
  assert {
    condition     = length(aws_apigatewayv2_authorizer.jwt) + length(aws_apigatewayv2_authorizer.lambda) + length(aws_lambda_permission.authorizer) == 0
    error_message = "api_key: no authorizer and no authorizer permission."
  }
  assert {
    condition     = aws_lambda_function.fn["api"].environment[0].variables["TASKLEASE_AUTH_MODE"] == "api_key"
    error_message = "api_key: the API function must run with TASKLEASE_AUTH_MODE=api_key."
  }
  assert {
    condition     = !contains(keys(aws_lambda_function.fn["api"].environment[0].variables), "TASKLEASE_AUTHORIZER_TENANT_FIELD")
    error_message = "api_key: no authorizer field to trust."
  }
  assert {
    condition = (
      aws_lambda_function.fn["api"].environment[0].variables["TASKLEASE_RATE_LIMIT_PER_SECOND"] == "50" &&
      aws_lambda_function.fn["api"].environment[0].variables["TASKLEASE_RATE_LIMIT_BURST"] == "100" &&
      aws_lambda_function.fn["api"].environment[0].variables["TASKLEASE_MAX_JOBS_IN_FLIGHT"] == "10000" &&
      aws_lambda_function.fn["api"].environment[0].variables["TASKLEASE_MAX_BODY_BYTES"] == "262144"
    )
    error_message = "The API function must get the per-tenant limits and the body cap."
  }
  assert {
    condition     = !contains(keys(aws_lambda_function.fn["worker"].environment[0].variables), "TASKLEASE_AUTH_MODE")
    error_message = "Only the API function needs the auth settings."
  }
}

run "jwt_uses_an_api_gateway_jwt_authorizer_and_the_claims" {
  command = plan

  variables {
    api_auth_mode    = "jwt"
    jwt_issuer       = "https://cognito-idp.us-east-1.amazonaws.com/us-east-1_example"
    jwt_audience     = ["client-one", "client-two"]
    jwt_tenant_claim = "custom:tenant"
  }

  assert {
    condition     = aws_apigatewayv2_route.default.authorization_type == "JWT"
    error_message = "jwt: the route must use the JWT authorizer."
  }
  assert {
    condition     = length(aws_apigatewayv2_authorizer.jwt) == 1 && length(aws_apigatewayv2_authorizer.lambda) == 0 && length(aws_lambda_permission.authorizer) == 0
    error_message = "jwt: exactly the JWT authorizer."
  }
  assert {
    condition = (
      aws_apigatewayv2_authorizer.jwt[0].authorizer_type == "JWT" &&
      aws_apigatewayv2_authorizer.jwt[0].jwt_configuration[0].issuer == "https://cognito-idp.us-east-1.amazonaws.com/us-east-1_example" &&
      toset(aws_apigatewayv2_authorizer.jwt[0].jwt_configuration[0].audience) == toset(["client-one", "client-two"]) &&
      aws_apigatewayv2_authorizer.jwt[0].identity_sources == toset(["$request.header.Authorization"])
    )
    error_message = "jwt: the authorizer must check the issuer and audiences given, on the Authorization header."
  }
  assert {
    condition = (
      aws_lambda_function.fn["api"].environment[0].variables["TASKLEASE_AUTH_MODE"] == "authorizer" &&
      aws_lambda_function.fn["api"].environment[0].variables["TASKLEASE_AUTHORIZER_TENANT_FIELD"] == "jwt.claims.custom:tenant" &&
      aws_lambda_function.fn["api"].environment[0].variables["TASKLEASE_AUTHORIZER_ADMIN_FIELD"] == "jwt.claims.tasklease_admin"
    )
    error_message = "jwt: the API function must trust the authorizer and read the claims."
  }
}

run "jwt_without_an_admin_claim_has_no_admin_field" {
  command = plan

  variables {
    api_auth_mode   = "jwt"
    jwt_issuer      = "https://issuer.example.com/"
    jwt_audience    = ["tasklease"]
    jwt_admin_claim = null
  }

  assert {
    condition     = aws_lambda_function.fn["api"].environment[0].variables["TASKLEASE_AUTHORIZER_ADMIN_FIELD"] == ""
    error_message = "jwt with jwt_admin_claim = null: the admin field must be empty (no admin through the API)."
  }
}

run "lambda_uses_the_operators_request_authorizer" {
  command = plan

  variables {
    api_auth_mode                   = "lambda"
    lambda_authorizer_function_arn  = "arn:aws:lambda:us-east-1:123456789012:function:tenant-authorizer:live"
    lambda_authorizer_cache_seconds = 60
  }

  assert {
    condition     = aws_apigatewayv2_route.default.authorization_type == "CUSTOM"
    error_message = "lambda: the route must use the Lambda authorizer."
  }
  assert {
    condition     = length(aws_apigatewayv2_authorizer.lambda) == 1 && length(aws_apigatewayv2_authorizer.jwt) == 0
    error_message = "lambda: exactly the Lambda authorizer."
  }
  assert {
    condition = (
      aws_apigatewayv2_authorizer.lambda[0].authorizer_type == "REQUEST" &&
      aws_apigatewayv2_authorizer.lambda[0].authorizer_payload_format_version == "2.0" &&
      aws_apigatewayv2_authorizer.lambda[0].enable_simple_responses == true &&
      aws_apigatewayv2_authorizer.lambda[0].authorizer_result_ttl_in_seconds == 60 &&
      aws_apigatewayv2_authorizer.lambda[0].authorizer_uri == "arn:aws:apigateway:us-east-1:lambda:path/2015-03-31/functions/arn:aws:lambda:us-east-1:123456789012:function:tenant-authorizer:live/invocations"
    )
    error_message = "lambda: a REQUEST authorizer, payload 2.0, simple responses, invoking the function given."
  }
  assert {
    condition = (
      aws_lambda_permission.authorizer[0].function_name == "arn:aws:lambda:us-east-1:123456789012:function:tenant-authorizer" &&
      aws_lambda_permission.authorizer[0].qualifier == "live" &&
      aws_lambda_permission.authorizer[0].principal == "apigateway.amazonaws.com"
    )
    error_message = "lambda: API Gateway must be allowed to invoke the authorizer (its alias)."
  }
  assert {
    condition = (
      aws_lambda_function.fn["api"].environment[0].variables["TASKLEASE_AUTH_MODE"] == "authorizer" &&
      aws_lambda_function.fn["api"].environment[0].variables["TASKLEASE_AUTHORIZER_TENANT_FIELD"] == "lambda.tenant" &&
      aws_lambda_function.fn["api"].environment[0].variables["TASKLEASE_AUTHORIZER_ADMIN_FIELD"] == "lambda.admin"
    )
    error_message = "lambda: the API function must read lambda.tenant and lambda.admin."
  }
}

run "lambda_with_an_unqualified_arn" {
  command = plan

  variables {
    api_auth_mode                  = "lambda"
    lambda_authorizer_function_arn = "arn:aws:lambda:us-east-1:123456789012:function:tenant-authorizer"
  }

  assert {
    condition     = aws_lambda_permission.authorizer[0].qualifier == null
    error_message = "An unqualified function ARN needs no qualifier on the permission."
  }
}

# --- what the validations refuse -----------------------------------------------------

run "jwt_needs_an_issuer_and_an_audience" {
  command = plan
  variables {
    api_auth_mode = "jwt"
  }
  expect_failures = [var.jwt_issuer, var.jwt_audience]
}

run "lambda_needs_the_authorizer_function" {
  command = plan
  variables {
    api_auth_mode = "lambda"
  }
  expect_failures = [var.lambda_authorizer_function_arn]
}

run "aws_iam_is_not_an_auth_mode" {
  command = plan
  variables {
    api_auth_mode = "AWS_IAM"
  }
  expect_failures = [var.api_auth_mode]
}

run "a_dotted_claim_cannot_be_read_by_the_app" {
  command = plan
  variables {
    jwt_tenant_claim = "https://example.com/tenant"
  }
  expect_failures = [var.jwt_tenant_claim]
}

run "limits_outside_the_apps_ranges_are_refused" {
  command = plan
  variables {
    tenant_rate_limit_per_second = 0
    tenant_rate_limit_burst      = 0
    tenant_max_jobs_in_flight    = 100000001
    api_max_body_bytes           = 1023
  }
  expect_failures = [
    var.tenant_rate_limit_per_second,
    var.tenant_rate_limit_burst,
    var.tenant_max_jobs_in_flight,
    var.api_max_body_bytes,
  ]
}

run "the_callback_routes_are_open_in_every_mode" {
  command = plan

  variables {
    api_auth_mode                  = "lambda"
    lambda_authorizer_function_arn = "arn:aws:lambda:us-east-1:123456789012:function:tenant-authorizer"
  }

  assert {
    condition = (
      toset(keys(aws_apigatewayv2_route.callbacks)) == toset(["POST /v1/callbacks/{token}", "POST /v1/callbacks/{token}/heartbeat"]) &&
      alltrue([for r in aws_apigatewayv2_route.callbacks : r.authorization_type == "NONE" && r.authorizer_id == null])
    )
    error_message = "The callback routes must be open (their token is the credential), even with an authorizer on $default."
  }
  assert {
    condition     = aws_apigatewayv2_route.default.authorization_type == "CUSTOM"
    error_message = "lambda: every other route keeps the authorizer."
  }
}
