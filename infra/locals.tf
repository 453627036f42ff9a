locals {
  # One source of truth for what the code and the infrastructure share:
  # app/settings/shared_settings.json. A variable left at null takes its value from there;
  # tests/infra/test_drift.py fails when the JSON, these locals or app/settings/config.py's
  # constraints disagree.
  shared = jsondecode(file("${path.module}/../app/settings/shared_settings.json"))

  visibility_timeout_seconds = var.visibility_timeout_seconds != null ? var.visibility_timeout_seconds : local.shared.visibility_timeout_seconds
  worker_timeout_seconds     = var.worker_timeout_seconds != null ? var.worker_timeout_seconds : local.shared.worker_timeout_seconds
  max_attempts               = var.max_attempts != null ? var.max_attempts : local.shared.max_attempts
  max_receive_count          = var.max_receive_count != null ? var.max_receive_count : local.shared.max_receive_count
  batch_size                 = var.batch_size != null ? var.batch_size : local.shared.batch_size
  message_retention_seconds  = var.message_retention_seconds != null ? var.message_retention_seconds : local.shared.message_retention_seconds
  dlq_retention_seconds      = var.dlq_retention_seconds != null ? var.dlq_retention_seconds : local.shared.dlq_retention_seconds

  # Queue names follow the app's convention (Settings.queue_name, create_queues: "<name>-dlq",
  # "<name>-high", "<name>-low").
  queue_name = "${var.name}-jobs"
  dlq_name   = "${var.name}-jobs-dlq"

  # One source queue and DLQ per priority (docs/explain/design.md#priorities); each has its own event
  # source mapping, whose maximum concurrency is its weight's share of
  # worker_maximum_concurrency (at least 2, AWS's minimum).
  priorities = {
    for p in ["high", "normal", "low"] : p => {
      queue_name = p == "normal" ? local.queue_name : "${local.queue_name}-${p}"
      dlq_name   = p == "normal" ? local.dlq_name : "${local.queue_name}-${p}-dlq"
    }
  }
  priority_weight_total = sum([for p in keys(local.priorities) : var.priority_weights[p]])
  priority_max_concurrency = {
    for p in keys(local.priorities) :
    p => max(2, floor(var.worker_maximum_concurrency * var.priority_weights[p] / local.priority_weight_total))
  }
  # TASKLEASE_PRIORITY_WEIGHTS: what the local event source polls by, from the same variable.
  priority_weights_setting = join(",", [for p in ["high", "normal", "low"] : "${p}=${var.priority_weights[p]}"])

  # What deployment_profile chooses (app/cost/profiles.py holds the same values;
  # tests/infra/test_cost_defaults.py fails when they disagree).
  profiles = {
    small = {
      interface_endpoints = false
      ipv6_egress         = true
      nat_gateway_per_az  = false
      db_multi_az         = false
      worker_memory_mb    = 256
      tracing_mode        = "PassThrough"
      emf_metrics         = "tasklease_jobs_submitted_total,tasklease_jobs_completed_total,tasklease_job_run_seconds_count,tasklease_job_run_seconds_sum,tasklease_job_queued_to_leased_seconds_count,tasklease_job_queued_to_leased_seconds_sum,tasklease_model_cost_dollars_total"
      emf_dimensions      = "outcome"
    }
    production = {
      interface_endpoints = true
      ipv6_egress         = false
      nat_gateway_per_az  = true
      db_multi_az         = true
      worker_memory_mb    = 1024
      tracing_mode        = "Active"
      emf_metrics         = "all"
      emf_dimensions      = "all"
    }
  }
  profile          = local.profiles[var.deployment_profile]
  worker_memory_mb = var.worker_memory_mb != null ? var.worker_memory_mb : local.profile.worker_memory_mb
  db_multi_az      = var.db_multi_az != null ? var.db_multi_az : local.profile.db_multi_az
  nat_gateways     = var.enable_nat_gateway ? (local.profile.nat_gateway_per_az ? length(local.azs) : 1) : 0

  azs = length(var.availability_zones) > 0 ? var.availability_zones : ["${var.aws_region}a", "${var.aws_region}b"]

  # Built by `make package` (scripts/package_lambda.py); one artefact for all three functions.
  lambda_package  = var.lambda_package_path != null ? var.lambda_package_path : "${path.module}/build/lambda.zip"
  lambda_manifest = "${local.lambda_package}.json"
}
