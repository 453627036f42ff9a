# `terraform test`: the functions' runtime and architecture, and the package manifest
# that `make package` writes beside the zip (infra/tests/packages/ holds stand-ins, each
# manifest with its zip's sha256). A package built for another Python or instruction
# set, with no manifest, or with another zip's manifest fails the plan.

mock_provider "aws" {
  source = "./tests/mocks"
}

run "the_defaults_are_python3_13_on_arm64" {
  command = plan
  variables {
    lambda_package_path = "tests/packages/arm64-python3.13.zip"
  }

  assert {
    condition     = alltrue([for f in aws_lambda_function.fn : f.runtime == "python3.13" && f.architectures == tolist(["arm64"])])
    error_message = "Every function must run python3.13 on arm64 by default."
  }
}

run "x86_64_and_python3_12_are_selectable" {
  command = plan
  variables {
    lambda_package_path = "tests/packages/x86_64-python3.12.zip"
    lambda_architecture = "x86_64"
    lambda_runtime      = "python3.12"
  }

  assert {
    condition     = alltrue([for f in aws_lambda_function.fn : f.runtime == "python3.12" && f.architectures == tolist(["x86_64"])])
    error_message = "Every function must take lambda_runtime and lambda_architecture."
  }
}

run "a_package_for_another_architecture_fails_the_plan" {
  command = plan
  variables {
    lambda_package_path = "tests/packages/arm64-python3.13.zip"
    lambda_architecture = "x86_64"
  }
  expect_failures = [aws_lambda_function.fn]
}

run "a_package_for_another_python_fails_the_plan" {
  command = plan
  variables {
    lambda_package_path = "tests/packages/arm64-python3.13.zip"
    lambda_runtime      = "python3.12"
  }
  expect_failures = [aws_lambda_function.fn]
}

run "a_package_without_its_manifest_fails_the_plan" {
  command = plan
  variables {
    lambda_package_path = "tests/packages/no-manifest.zip"
  }
  expect_failures = [aws_lambda_function.fn]
}

run "a_manifest_of_another_zip_fails_the_plan" {
  command = plan
  variables {
    lambda_package_path = "tests/packages/stale.zip"
  }
  expect_failures = [aws_lambda_function.fn]
}

run "a_runtime_the_package_cannot_build_for_is_refused" {
  command = plan
  variables {
    lambda_package_path = "tests/packages/arm64-python3.13.zip"
    lambda_runtime      = "python3.11"
  }
  expect_failures = [var.lambda_runtime]
}
