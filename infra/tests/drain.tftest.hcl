# `terraform test`: the worker's drain alias (lambda.tf), planned against the mock AWS
# provider. Off by default; with worker_drain_version, an alias "drain" on that version
# subscribed to every priority's queue with its own small concurrency.

mock_provider "aws" {
  source = "./tests/mocks"
}

variables {
  lambda_package_path = "tests/packages/arm64-python3.13.zip"
}

run "no_drain_alias_by_default" {
  command = plan

  assert {
    condition     = length(aws_lambda_alias.worker_drain) == 0 && length(aws_lambda_event_source_mapping.worker_drain) == 0
    error_message = "no drain alias and no mapping for it unless worker_drain_version."
  }
  assert {
    condition     = aws_lambda_function.fn["worker"].publish && !aws_lambda_function.fn["api"].publish
    error_message = "the worker's code is published as a version (the drain alias needs one); the others' need not be."
  }
}

run "the_drain_alias_reads_every_queue" {
  command = plan

  variables {
    worker_drain_version             = "7"
    worker_drain_maximum_concurrency = 3
  }

  assert {
    condition     = aws_lambda_alias.worker_drain[0].function_version == "7" && aws_lambda_alias.worker_drain[0].name == "drain"
    error_message = "the alias is \"drain\" on the version given."
  }
  assert {
    condition     = toset(keys(aws_lambda_event_source_mapping.worker_drain)) == toset(keys(aws_lambda_event_source_mapping.worker))
    error_message = "the drain alias reads every queue the worker reads."
  }
  assert {
    condition     = alltrue([for m in aws_lambda_event_source_mapping.worker_drain : m.scaling_config[0].maximum_concurrency == 3])
    error_message = "each drain mapping has worker_drain_maximum_concurrency."
  }
}

run "latest_is_not_a_drain_version" {
  command = plan

  variables {
    worker_drain_version = "$LATEST"
  }

  expect_failures = [var.worker_drain_version]
}
