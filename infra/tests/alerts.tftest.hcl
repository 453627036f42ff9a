# `terraform test`: the alerts' EventBridge bus (alerts.tf), planned against the mock AWS
# provider. Off by default (nothing made, nothing in the sweeper's environment); on, the
# bus, the sweeper told its name, and an EventBridge endpoint unless the NAT gateway is on.

mock_provider "aws" {
  source = "./tests/mocks"
}

variables {
  lambda_package_path = "tests/packages/arm64-python3.13.zip"
}

run "alerts_are_off_by_default" {
  command = plan

  assert {
    condition     = length(aws_cloudwatch_event_bus.alerts) == 0 && length(aws_vpc_endpoint.events) == 0
    error_message = "no bus and no endpoint unless enable_alert_event_bus."
  }
  assert {
    condition     = !contains(keys(aws_lambda_function.fn["sweeper"].environment[0].variables), "TASKLEASE_ALERT_EVENT_BUS")
    error_message = "the sweeper names no bus by default."
  }
}

run "the_bus_is_named_to_the_sweeper_with_its_thresholds" {
  command = plan

  variables {
    enable_alert_event_bus      = true
    alert_dlq_threshold         = 25
    alert_oldest_queued_seconds = 900
  }

  assert {
    condition     = aws_cloudwatch_event_bus.alerts[0].name == "tasklease-alerts"
    error_message = "the bus is <name>-alerts."
  }
  assert {
    condition = (
      aws_lambda_function.fn["sweeper"].environment[0].variables["TASKLEASE_ALERT_EVENT_BUS"] == "tasklease-alerts" &&
      aws_lambda_function.fn["sweeper"].environment[0].variables["TASKLEASE_ALERT_DLQ_THRESHOLD"] == "25" &&
      aws_lambda_function.fn["sweeper"].environment[0].variables["TASKLEASE_ALERT_OLDEST_QUEUED_SECONDS"] == "900"
    )
    error_message = "the sweeper must be told the bus and the thresholds."
  }
  assert {
    condition     = length(aws_vpc_endpoint.events) == 1
    error_message = "without the NAT gateway the Lambdas reach EventBridge through an endpoint."
  }
}

run "with_the_nat_gateway_no_events_endpoint" {
  command = plan

  variables {
    enable_alert_event_bus = true
    enable_nat_gateway     = true
  }

  assert {
    condition     = length(aws_vpc_endpoint.events) == 0
    error_message = "the NAT gateway reaches EventBridge: no endpoint."
  }
}

run "a_threshold_below_one_is_refused" {
  command = plan

  variables {
    alert_dlq_threshold = 0
  }

  expect_failures = [var.alert_dlq_threshold]
}
