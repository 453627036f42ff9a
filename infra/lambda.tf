# Three functions from one artefact (infra/build/lambda.zip, `make package`).
# There is no separate outbox-relay function: in this codebase the relay is part
# of the sweeper (app/services/sweeper.py relay_outbox, called by sweep_once), so the
# scheduled sweeper function relays the outbox too.

locals {
  functions = {
    api = {
      handler     = "handlers.api.handler"
      description = "tasklease HTTP API (FastAPI via Mangum) behind API Gateway"
      timeout     = var.api_timeout_seconds
      memory      = var.api_memory_mb
      env = merge(
        { TASKLEASE_POOL_MAX_SIZE = tostring(var.db_pool_max_size) },
        # Who may call, as the route is set up (apigateway.tf, var.api_auth_mode).
        local.api_auth[var.api_auth_mode].env,
        # Per-tenant admission defaults and the body cap (app/settings/config.py).
        {
          TASKLEASE_RATE_LIMIT_PER_SECOND = tostring(var.tenant_rate_limit_per_second)
          TASKLEASE_RATE_LIMIT_BURST      = tostring(var.tenant_rate_limit_burst)
          TASKLEASE_MAX_JOBS_IN_FLIGHT    = tostring(var.tenant_max_jobs_in_flight)
          TASKLEASE_MAX_BODY_BYTES        = tostring(var.api_max_body_bytes)
          # The window on the queue a submission parks past (cap x window per slot).
          TASKLEASE_MAX_RUNNING_PER_TENANT = tostring(var.tenant_max_running)
          TASKLEASE_QUEUE_WINDOW_PER_SLOT  = tostring(var.tenant_queue_window_per_slot)
        },
      )
    }
    worker = {
      handler     = "handlers.worker.handler"
      description = "tasklease worker, fed by the SQS event source mapping"
      timeout     = local.worker_timeout_seconds
      memory      = local.worker_memory_mb
      env = {
        TASKLEASE_POOL_MAX_SIZE = tostring(var.db_pool_max_size)
        # The engine reads the time left from the Lambda context; this keeps the
        # setting that the local event source uses equal to the real timeout.
        TASKLEASE_FUNCTION_TIMEOUT_SECONDS = tostring(local.worker_timeout_seconds)
        # The claim's per-tenant cap, and the releases of parked jobs as leases end.
        TASKLEASE_MAX_RUNNING_PER_TENANT = tostring(var.tenant_max_running)
        TASKLEASE_QUEUE_WINDOW_PER_SLOT  = tostring(var.tenant_queue_window_per_slot)
      }
    }
    sweeper = {
      handler     = "handlers.sweeper.handler"
      description = "tasklease sweeper and outbox relay, every minute from EventBridge Scheduler"
      timeout     = var.sweeper_timeout_seconds
      memory      = var.sweeper_memory_mb
      # The sweeper releases parked jobs no lease's end released, and prunes finished
      # jobs past their retention (docs/explain/design.md#retention).
      # It measures the alerts' thresholds and delivers the alerts too (alerts.tf).
      env = merge({
        TASKLEASE_MAX_RUNNING_PER_TENANT       = tostring(var.tenant_max_running)
        TASKLEASE_QUEUE_WINDOW_PER_SLOT        = tostring(var.tenant_queue_window_per_slot)
        TASKLEASE_RETAIN_SUCCEEDED_SECONDS     = tostring(var.retain_succeeded_seconds)
        TASKLEASE_RETAIN_CANCELLED_SECONDS     = tostring(var.retain_cancelled_seconds)
        TASKLEASE_RETAIN_DEAD_LETTERED_SECONDS = tostring(var.retain_dead_lettered_seconds)
        TASKLEASE_IDEMPOTENCY_WINDOW_SECONDS   = tostring(var.idempotency_window_seconds)
        TASKLEASE_PRUNE_BATCH_SIZE             = tostring(var.prune_batch_size)
        TASKLEASE_PRUNE_BATCHES_PER_SWEEP      = tostring(var.prune_batches_per_sweep)
      }, local.alert_env)
    }
    # The database is private: migrations run from inside the VPC. Invoke it once
    # after each deploy (infra/README.md); applied migrations are skipped.
    migrate = {
      handler     = "handlers.migrate.handler"
      description = "tasklease migrations, invoked once after each deploy"
      timeout     = 300
      memory      = 256
      env         = {}
    }
  }

  # What every function reads (app/settings/config.py). The database password is NOT here:
  # it lives in the RDS-managed secret; app/settings/config.py builds the URL from
  # TASKLEASE_DATABASE_SECRET_ARN and the host, port and name, once per process.
  common_env = merge(
    {
      TASKLEASE_QUEUE_URL                  = aws_sqs_queue.source["normal"].url
      TASKLEASE_DLQ_URL                    = aws_sqs_queue.dlq["normal"].url
      TASKLEASE_QUEUE_URL_HIGH             = aws_sqs_queue.source["high"].url
      TASKLEASE_DLQ_URL_HIGH               = aws_sqs_queue.dlq["high"].url
      TASKLEASE_QUEUE_URL_LOW              = aws_sqs_queue.source["low"].url
      TASKLEASE_DLQ_URL_LOW                = aws_sqs_queue.dlq["low"].url
      TASKLEASE_PRIORITY_WEIGHTS           = local.priority_weights_setting
      TASKLEASE_QUEUE_NAME                 = aws_sqs_queue.source["normal"].name
      TASKLEASE_VISIBILITY_TIMEOUT_SECONDS = tostring(local.visibility_timeout_seconds)
      TASKLEASE_MAX_ATTEMPTS               = tostring(local.max_attempts)
      TASKLEASE_MAX_RECEIVE_COUNT          = tostring(local.max_receive_count)
      TASKLEASE_BATCH_SIZE                 = tostring(local.batch_size)
      TASKLEASE_MESSAGE_RETENTION_SECONDS  = tostring(local.message_retention_seconds)
      TASKLEASE_DLQ_RETENTION_SECONDS      = tostring(local.dlq_retention_seconds)
      TASKLEASE_DATABASE_SECRET_ARN        = aws_db_instance.main.master_user_secret[0].secret_arn
      TASKLEASE_DATABASE_HOST              = aws_db_instance.main.address
      TASKLEASE_DATABASE_PORT              = tostring(aws_db_instance.main.port)
      TASKLEASE_DATABASE_NAME              = aws_db_instance.main.db_name
      # The parameter group sets rds.force_ssl=1.
      TASKLEASE_DATABASE_SSLMODE = "require"
      TASKLEASE_LOG_LEVEL        = var.log_level
      TASKLEASE_KINDS            = var.kinds
      TASKLEASE_MODEL_PROVIDER   = var.model_provider
      # handlers/emf.py: which metrics become CloudWatch custom metrics, under which
      # labels (the deployment_profile's; small bounds them, production keeps all).
      TASKLEASE_EMF_METRICS    = local.profile.emf_metrics
      TASKLEASE_EMF_DIMENSIONS = local.profile.emf_dimensions
    },
    var.openai_base_url == null ? {} : { TASKLEASE_OPENAI_BASE_URL = var.openai_base_url },
    var.webhook_url == null ? {} : { TASKLEASE_WEBHOOK_URL = var.webhook_url },
    # small: IPv6 is the only way out without enable_nat_gateway, and the AWS SDKs use a
    # service's IPv4-only endpoint unless told to take its dual-stack one (SQS's and
    # Secrets Manager's answer over IPv6): the SDKs' own setting, read by botocore.
    local.profile.ipv6_egress ? { AWS_USE_DUALSTACK_ENDPOINT = "true" } : {},
  )
}

resource "aws_cloudwatch_log_group" "fn" {
  for_each = local.functions
  #checkov:skip=CKV_AWS_158:encrypted by CloudWatch Logs' own key; a customer-managed KMS key needs an account-specific key policy, left to the operator (infra/README.md)

  name              = "/aws/lambda/${var.name}-${each.key}"
  retention_in_days = var.log_retention_days
}

resource "aws_lambda_function" "fn" {
  for_each = local.functions
  #checkov:skip=CKV_AWS_116:api and worker are invoked synchronously (API Gateway, the SQS event source, whose failures go to the queue's own DLQ); the sweeper's async config below drops a failed run because the next one starts a minute later
  #checkov:skip=CKV_AWS_115:concurrency is bounded where it is decided: scaling_config.maximum_concurrency for the worker, stage throttling for the API; a reservation on a new account (limit 10) fails to apply, and the sweeper is safe to run twice (SKIP LOCKED)
  #checkov:skip=CKV_AWS_173:the environment holds no secret (the password stays in Secrets Manager); Lambda encrypts it at rest with its AWS-managed key
  #checkov:skip=CKV_AWS_50:tracing is the deployment_profile's: Active in production; PassThrough in small (traced only when an upstream sends a sampled header), which saves X-Ray's $5 per million traces (docs/howto/deploy-aws.md#profiles)
  #checkov:skip=CKV_AWS_272:code signing needs an AWS Signer profile the operator owns; the artefact is built reproducibly from uv.lock by `make package`

  function_name = "${var.name}-${each.key}"
  description   = each.value.description
  # The worker's code is published as a numbered version on each change, so a deploy can
  # keep the previous one subscribed as the drain alias (worker_drain_version below).
  publish       = each.key == "worker"
  role          = aws_iam_role.fn[each.key].arn
  handler       = each.value.handler
  runtime       = var.lambda_runtime
  architectures = [var.lambda_architecture]
  timeout       = each.value.timeout
  memory_size   = each.value.memory

  filename         = local.lambda_package
  source_code_hash = filebase64sha256(local.lambda_package)

  vpc_config {
    subnet_ids         = aws_subnet.private[*].id
    security_group_ids = [aws_security_group.lambda.id]
    # small: outbound IPv6 through the egress-only internet gateway (network.tf).
    ipv6_allowed_for_dual_stack = local.profile.ipv6_egress
  }

  environment {
    variables = merge(local.common_env, each.value.env)
  }

  tracing_config {
    mode = local.profile.tracing_mode
  }

  logging_config {
    log_format = "Text"
    log_group  = aws_cloudwatch_log_group.fn[each.key].name
  }

  lifecycle {
    # The manifest is written by scripts/package_lambda.py next to the zip: compiled
    # wheels are built for one architecture and one Python, so either mismatch fails
    # at import time on Lambda; here it fails the plan instead. The manifest must be
    # there and must be the zip's own (its sha256), or the checks would check nothing.
    precondition {
      condition     = fileexists(local.lambda_manifest)
      error_message = "No manifest beside the package (${local.lambda_manifest}): build the zip with `make package`, which writes both."
    }
    precondition {
      condition     = !fileexists(local.lambda_manifest) || try(jsondecode(file(local.lambda_manifest)).sha256, "") == filesha256(local.lambda_package)
      error_message = "The package manifest belongs to another zip (its sha256 differs): rebuild with `make package`."
    }
    precondition {
      condition     = !fileexists(local.lambda_manifest) || try(jsondecode(file(local.lambda_manifest)).architecture, "") == var.lambda_architecture
      error_message = "The package was built for another architecture than lambda_architecture: rebuild with `make package LAMBDA_ARCH=<arch>`."
    }
    precondition {
      condition     = !fileexists(local.lambda_manifest) || try(jsondecode(file(local.lambda_manifest)).runtime, "") == var.lambda_runtime
      error_message = "The package was built for another Python than lambda_runtime: rebuild with `make package LAMBDA_RUNTIME=<runtime>`."
    }
  }

  depends_on = [
    aws_iam_role_policy.fn,
    aws_iam_role_policy_attachment.vpc_access,
    aws_cloudwatch_log_group.fn,
  ]
}

# SQS -> worker, one mapping per priority's queue, each at most its weight's share of
# the workers at once. Partial batch responses: the handler returns
# {"batchItemFailures": [...]} and only those messages come back.
resource "aws_lambda_event_source_mapping" "worker" {
  for_each                           = local.priorities
  event_source_arn                   = aws_sqs_queue.source[each.key].arn
  function_name                      = aws_lambda_function.fn["worker"].arn
  batch_size                         = local.batch_size
  maximum_batching_window_in_seconds = var.maximum_batching_window_seconds
  function_response_types            = ["ReportBatchItemFailures"]

  scaling_config {
    maximum_concurrency = local.priority_max_concurrency[each.key]
  }

  lifecycle {
    precondition {
      # https://docs.aws.amazon.com/lambda/latest/dg/services-sqs-configure.html
      condition     = local.visibility_timeout_seconds >= 6 * local.worker_timeout_seconds
      error_message = "The source queue's visibility timeout must be at least 6 x the worker function's timeout."
    }
  }
}

moved {
  from = aws_lambda_event_source_mapping.worker
  to   = aws_lambda_event_source_mapping.worker["normal"]
}

# The drain alias: a published version of the worker kept subscribed beside the new code
# while jobs of a kind declared on_version_change="pin" that started on it finish
# (docs/howto/kind-versions.md). The new code hands such a job back unrun; the old
# version, still serving that kind version, claims and runs it. Off ("") by default.
resource "aws_lambda_alias" "worker_drain" {
  count            = var.worker_drain_version == "" ? 0 : 1
  name             = "drain"
  description      = "the previous worker code, kept until its pinned jobs drain"
  function_name    = aws_lambda_function.fn["worker"].function_name
  function_version = var.worker_drain_version
}

resource "aws_lambda_event_source_mapping" "worker_drain" {
  for_each                           = var.worker_drain_version == "" ? {} : local.priorities
  event_source_arn                   = aws_sqs_queue.source[each.key].arn
  function_name                      = aws_lambda_alias.worker_drain[0].arn
  batch_size                         = local.batch_size
  maximum_batching_window_in_seconds = var.maximum_batching_window_seconds
  function_response_types            = ["ReportBatchItemFailures"]

  scaling_config {
    maximum_concurrency = var.worker_drain_maximum_concurrency
  }
}

# The sweeper is invoked asynchronously by the scheduler. A failed run is not
# retried: the next one starts a minute later and does the same idempotent work.
resource "aws_lambda_function_event_invoke_config" "sweeper" {
  function_name                = aws_lambda_function.fn["sweeper"].function_name
  maximum_retry_attempts       = 0
  maximum_event_age_in_seconds = 60
}
