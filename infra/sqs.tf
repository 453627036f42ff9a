# The source queues (one per priority: high, normal, low) and their dead-letter
# queues, each DLQ paired with its source. The message is a wake-up call (the job
# row is the truth, docs/explain/design.md#truth), so the queues hold nothing worth a customer key:
# SQS-managed SSE encrypts them at rest. Every message tasklease sends carries the
# job's tenant as its MessageGroupId: on these standard queues that makes them fair
# queues (AWS serves a quiet tenant first while another's burst is queued).

resource "aws_sqs_queue" "dlq" {
  for_each                  = local.priorities
  name                      = each.value.dlq_name
  message_retention_seconds = local.dlq_retention_seconds
  sqs_managed_sse_enabled   = true
}

resource "aws_sqs_queue" "source" {
  for_each = local.priorities
  name     = each.value.queue_name
  # The lease: the engine mirrors it in the job row and extends both by heartbeat.
  visibility_timeout_seconds = local.visibility_timeout_seconds
  message_retention_seconds  = local.message_retention_seconds
  # Long polling for any consumer other than Lambda (the CLI's local event source).
  receive_wait_time_seconds = 20
  sqs_managed_sse_enabled   = true

  # The last backstop only: attempts are counted in the database at claim time,
  # so maxReceiveCount sits well above the attempt budget (docs/explain/design.md#leases).
  redrive_policy = jsonencode({
    deadLetterTargetArn = aws_sqs_queue.dlq[each.key].arn
    maxReceiveCount     = local.max_receive_count
  })

  lifecycle {
    precondition {
      condition     = local.max_receive_count > local.max_attempts
      error_message = "max_receive_count must be above max_attempts: the redrive policy is only the last backstop."
    }
    precondition {
      # The app refuses it too (TASKLEASE_RETAIN_DEAD_LETTERED_SECONDS), at the sweeper's start.
      condition     = var.retain_dead_lettered_seconds == 0 || var.retain_dead_lettered_seconds >= local.dlq_retention_seconds
      error_message = "retain_dead_lettered_seconds must be 0 (forever) or at least the DLQ's retention: a dead letter's job is kept as long as its message may be in the DLQ."
    }
    precondition {
      condition     = local.dlq_retention_seconds > local.message_retention_seconds
      error_message = "dlq_retention_seconds must be longer than message_retention_seconds: a dead-lettered message keeps its original enqueue time."
    }
    precondition {
      # https://docs.aws.amazon.com/lambda/latest/dg/services-sqs-configure.html
      condition     = local.visibility_timeout_seconds >= 6 * local.worker_timeout_seconds
      error_message = "visibility_timeout_seconds must be at least 6 x worker_timeout_seconds (AWS's rule for SQS event sources)."
    }
  }
}

# Only its own source queue may use a DLQ; redrive (StartMessageMoveTask) moves
# messages back to it.
resource "aws_sqs_queue_redrive_allow_policy" "dlq" {
  for_each  = local.priorities
  queue_url = aws_sqs_queue.dlq[each.key].id

  redrive_allow_policy = jsonencode({
    redrivePermission = "byQueue"
    sourceQueueArns   = [aws_sqs_queue.source[each.key].arn]
  })
}

# A deployment made before priorities keeps its queues: they become the normal ones.
moved {
  from = aws_sqs_queue.source
  to   = aws_sqs_queue.source["normal"]
}

moved {
  from = aws_sqs_queue.dlq
  to   = aws_sqs_queue.dlq["normal"]
}

moved {
  from = aws_sqs_queue_redrive_allow_policy.dlq
  to   = aws_sqs_queue_redrive_allow_policy.dlq["normal"]
}
