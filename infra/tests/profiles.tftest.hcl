# `terraform test`: what deployment_profile chooses (locals.tf local.profiles), planned
# against the mock AWS provider. production (the default): interface endpoints, Multi-AZ,
# tracing Active, a NAT gateway per zone with enable_nat_gateway; small: no endpoints, no
# NAT, IPv6 out through an egress-only internet gateway, Single-AZ, the worker at 256 MB,
# tracing PassThrough, EMF metrics bounded.

mock_provider "aws" {
  source = "./tests/mocks"
}

variables {
  lambda_package_path = "tests/packages/arm64-python3.13.zip"
}

run "production_by_default" {
  command = plan

  assert {
    condition     = length(aws_vpc_endpoint.interface) == 2 && length(aws_egress_only_internet_gateway.main) == 0
    error_message = "production reaches SQS and Secrets Manager through interface endpoints, not IPv6."
  }
  assert {
    condition     = aws_db_instance.main.multi_az && aws_lambda_function.fn["worker"].memory_size == 1024
    error_message = "production: a Multi-AZ database and the worker at 1024 MB."
  }
  assert {
    condition     = alltrue([for f in aws_lambda_function.fn : !contains(keys(f.environment[0].variables), "AWS_USE_DUALSTACK_ENDPOINT")])
    error_message = "production reaches SQS and Secrets Manager through endpoints: the SDKs' default endpoints."
  }
  assert {
    condition     = alltrue([for f in aws_lambda_function.fn : f.tracing_config[0].mode == "Active" && !f.vpc_config[0].ipv6_allowed_for_dual_stack])
    error_message = "production: every function traced Active, no IPv6."
  }
  assert {
    condition     = aws_lambda_function.fn["worker"].environment[0].variables["TASKLEASE_EMF_METRICS"] == "all" && aws_lambda_function.fn["worker"].environment[0].variables["TASKLEASE_EMF_DIMENSIONS"] == "all"
    error_message = "production writes every EMF metric under every label."
  }
}

run "production_has_a_nat_gateway_per_zone" {
  command = plan

  variables {
    enable_nat_gateway = true
  }

  assert {
    condition     = length(aws_nat_gateway.main) == 2 && length(aws_eip.nat) == 2 && length(aws_route.private_nat) == 2
    error_message = "production with enable_nat_gateway: a NAT gateway, an address and a route per zone."
  }
}

run "small" {
  command = plan

  variables {
    deployment_profile = "small"
  }

  assert {
    condition     = length(aws_vpc_endpoint.interface) == 0 && length(aws_nat_gateway.main) == 0
    error_message = "small: no interface endpoints and no NAT gateway."
  }
  assert {
    condition     = alltrue([for f in aws_lambda_function.fn : f.environment[0].variables["AWS_USE_DUALSTACK_ENDPOINT"] == "true"])
    error_message = "small: over IPv6 alone every function's SDK must take the services' dual-stack endpoints (AWS_USE_DUALSTACK_ENDPOINT)."
  }
  assert {
    condition     = length(aws_egress_only_internet_gateway.main) == 1 && length(aws_route.private_ipv6) == 2 && aws_route.private_ipv6[0].destination_ipv6_cidr_block == "::/0"
    error_message = "small: each zone's route table sends IPv6 to the egress-only internet gateway."
  }
  assert {
    condition     = aws_vpc.main.assign_generated_ipv6_cidr_block && length(aws_vpc_security_group_egress_rule.lambda_to_internet_ipv6) == 1
    error_message = "small: a dual-stack VPC and HTTPS out over IPv6 from the functions."
  }
  assert {
    condition     = alltrue([for f in aws_lambda_function.fn : f.tracing_config[0].mode == "PassThrough" && f.vpc_config[0].ipv6_allowed_for_dual_stack])
    error_message = "small: tracing PassThrough and IPv6 out on every function."
  }
  assert {
    condition     = !aws_db_instance.main.multi_az && aws_lambda_function.fn["worker"].memory_size == 256
    error_message = "small: a Single-AZ database and the worker at 256 MB."
  }
  assert {
    condition     = aws_lambda_function.fn["worker"].environment[0].variables["TASKLEASE_EMF_DIMENSIONS"] == "outcome" && strcontains(aws_lambda_function.fn["worker"].environment[0].variables["TASKLEASE_EMF_METRICS"], "tasklease_jobs_completed_total")
    error_message = "small bounds its EMF metrics."
  }
}

run "small_with_one_nat_gateway_and_overrides" {
  command = plan

  variables {
    deployment_profile = "small"
    enable_nat_gateway = true
    worker_memory_mb   = 512
    db_multi_az        = true
  }

  assert {
    condition     = length(aws_nat_gateway.main) == 1 && length(aws_route.private_nat) == 2
    error_message = "small with enable_nat_gateway: one NAT gateway, both zones routed to it."
  }
  assert {
    condition     = aws_lambda_function.fn["worker"].memory_size == 512 && aws_db_instance.main.multi_az
    error_message = "worker_memory_mb and db_multi_az override the profile's."
  }
}

run "an_unknown_profile_is_refused" {
  command = plan

  variables {
    deployment_profile = "medium"
  }

  expect_failures = [var.deployment_profile]
}
