# The source queue and its dead-letter queue. The message is a wake-up call (the
# job row is the truth, DESIGN.md), so the queue holds nothing worth a customer
# key: SQS-managed SSE encrypts it at rest.

resource "aws_sqs_queue" "dlq" {
  name                      = local.dlq_name
  message_retention_seconds = local.dlq_retention_seconds
  sqs_managed_sse_enabled   = true
}

resource "aws_sqs_queue" "source" {
  name = local.queue_name
  # The lease: the engine mirrors it in the job row and extends both by heartbeat.
  visibility_timeout_seconds = local.visibility_timeout_seconds
  message_retention_seconds  = local.message_retention_seconds
  # Long polling for any consumer other than Lambda (the CLI's local event source).
  receive_wait_time_seconds = 20
  sqs_managed_sse_enabled   = true

  # The last backstop only: attempts are counted in the database at claim time,
  # so maxReceiveCount sits well above the attempt budget (DESIGN.md).
  redrive_policy = jsonencode({
    deadLetterTargetArn = aws_sqs_queue.dlq.arn
    maxReceiveCount     = local.max_receive_count
  })

  lifecycle {
    precondition {
      condition     = local.max_receive_count > local.max_attempts
      error_message = "max_receive_count must be above max_attempts: the redrive policy is only the last backstop."
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

# Only our source queue may use the DLQ; redrive (StartMessageMoveTask) moves
# messages back to it.
resource "aws_sqs_queue_redrive_allow_policy" "dlq" {
  queue_url = aws_sqs_queue.dlq.id

  redrive_allow_policy = jsonencode({
    redrivePermission = "byQueue"
    sourceQueueArns   = [aws_sqs_queue.source.arn]
  })
}
