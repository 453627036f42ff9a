# EventBridge Scheduler runs the sweeper (stalled leases, the outbox relay, lost
# messages) every minute.

locals {
  sweeper_schedule_name = "${var.name}-sweeper"
}

data "aws_iam_policy_document" "scheduler_assume" {
  statement {
    actions = ["sts:AssumeRole"]
    principals {
      type        = "Service"
      identifiers = ["scheduler.amazonaws.com"]
    }
    # Only our schedule may use the role (confused-deputy guard).
    condition {
      test     = "ArnLike"
      variable = "aws:SourceArn"
      values   = ["arn:${data.aws_partition.current.partition}:scheduler:${var.aws_region}:*:schedule/default/${local.sweeper_schedule_name}"]
    }
  }
}

resource "aws_iam_role" "scheduler" {
  name               = "${var.name}-scheduler"
  description        = "EventBridge Scheduler invoking ${var.name}-sweeper"
  assume_role_policy = data.aws_iam_policy_document.scheduler_assume.json
}

data "aws_iam_policy_document" "scheduler" {
  statement {
    sid       = "InvokeSweeper"
    actions   = ["lambda:InvokeFunction"]
    resources = [aws_lambda_function.fn["sweeper"].arn, "${aws_lambda_function.fn["sweeper"].arn}:*"]
  }
}

resource "aws_iam_role_policy" "scheduler" {
  name   = "${var.name}-scheduler"
  role   = aws_iam_role.scheduler.id
  policy = data.aws_iam_policy_document.scheduler.json
}

resource "aws_scheduler_schedule" "sweeper" {
  #checkov:skip=CKV_AWS_297:the schedule's only data is the constant input {"source": "tasklease.scheduler"}; the AWS-owned key that Scheduler uses is enough
  name        = local.sweeper_schedule_name
  description = "tasklease sweeper and outbox relay"

  schedule_expression = var.sweeper_schedule_expression
  flexible_time_window {
    mode = "OFF"
  }

  target {
    arn      = aws_lambda_function.fn["sweeper"].arn
    role_arn = aws_iam_role.scheduler.arn
    input    = jsonencode({ source = "tasklease.scheduler" })

    # A missed run is not worth a retry: the next one is a minute away.
    retry_policy {
      maximum_retry_attempts       = 0
      maximum_event_age_in_seconds = 60
    }
  }
}
