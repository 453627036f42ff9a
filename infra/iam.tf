# One role per function, each allowed only the actions it calls on only its own
# queues and the database secret. The SQS actions follow the code:
#   api     app/services/outbox.py send (SendMessage[Batch]), app/api/routes/health.py readyz depth (GetQueueAttributes)
#   worker  the event source mapping polls with the function's role (Receive, Delete,
#           GetQueueAttributes); the engine extends leases (ChangeMessageVisibility)
#           and dead-letters by sending to the DLQ (SendMessage)
#   sweeper outbox relay and lost-message re-sends (SendMessage on the source);
#           DLQ reconciliation and redrive (Receive/Delete/GetQueueAttributes and
#           StartMessageMoveTask/ListMessageMoveTasks on the DLQ, the move's source)
# SendMessageBatch and DeleteMessageBatch are authorised by SendMessage and DeleteMessage.

data "aws_iam_policy_document" "lambda_assume" {
  statement {
    actions = ["sts:AssumeRole"]
    principals {
      type        = "Service"
      identifiers = ["lambda.amazonaws.com"]
    }
  }
}

resource "aws_iam_role" "fn" {
  for_each = local.functions

  name               = "${var.name}-${each.key}"
  description        = "Execution role of the ${var.name}-${each.key} function"
  assume_role_policy = data.aws_iam_policy_document.lambda_assume.json
}

# ENIs in the VPC (ec2:CreateNetworkInterface & co. have no resource-level scoping).
resource "aws_iam_role_policy_attachment" "vpc_access" {
  for_each = local.functions

  role       = aws_iam_role.fn[each.key].name
  policy_arn = "arn:${data.aws_partition.current.partition}:iam::aws:policy/service-role/AWSLambdaVPCAccessExecutionRole"
}

# tracing_config Active: the function's segments go to X-Ray.
resource "aws_iam_role_policy_attachment" "xray" {
  for_each = local.functions

  role       = aws_iam_role.fn[each.key].name
  policy_arn = "arn:${data.aws_partition.current.partition}:iam::aws:policy/AWSXRayDaemonWriteAccess"
}

data "aws_iam_policy_document" "logs" {
  for_each = local.functions

  # Terraform creates the log group; the function only writes to its own.
  statement {
    sid       = "OwnLogGroup"
    actions   = ["logs:CreateLogStream", "logs:PutLogEvents"]
    resources = ["${aws_cloudwatch_log_group.fn[each.key].arn}:*"]
  }
}

data "aws_iam_policy_document" "db_secret" {
  statement {
    sid       = "DatabaseSecret"
    actions   = ["secretsmanager:GetSecretValue"]
    resources = [aws_db_instance.main.master_user_secret[0].secret_arn]
  }
}

data "aws_iam_policy_document" "api" {
  statement {
    sid     = "EnqueueAndDepth"
    actions = ["sqs:SendMessage", "sqs:GetQueueAttributes"]
    resources = [
      aws_sqs_queue.source["high"].arn,
      aws_sqs_queue.source["normal"].arn,
      aws_sqs_queue.source["low"].arn,
    ]
  }
}

data "aws_iam_policy_document" "worker" {
  # SendMessage too: the worker sends wake-ups when a job suspends, its children's and its
  # parent's messages, the parked jobs a lease's end releases, and a fresh message for a
  # delivery deferred near maxReceiveCount. Without it those sends were refused and left
  # to the sweeper's relay (a minute late on AWS).
  statement {
    sid = "ConsumeSource"
    actions = [
      "sqs:ReceiveMessage",
      "sqs:DeleteMessage",
      "sqs:ChangeMessageVisibility",
      "sqs:GetQueueAttributes",
      "sqs:SendMessage",
    ]
    resources = [
      aws_sqs_queue.source["high"].arn,
      aws_sqs_queue.source["normal"].arn,
      aws_sqs_queue.source["low"].arn,
    ]
  }

  statement {
    sid     = "DeadLetter"
    actions = ["sqs:SendMessage"]
    resources = [
      aws_sqs_queue.dlq["high"].arn,
      aws_sqs_queue.dlq["normal"].arn,
      aws_sqs_queue.dlq["low"].arn,
    ]
  }
}

data "aws_iam_policy_document" "sweeper" {
  statement {
    sid     = "ResendToSource"
    actions = ["sqs:SendMessage"]
    resources = [
      aws_sqs_queue.source["high"].arn,
      aws_sqs_queue.source["normal"].arn,
      aws_sqs_queue.source["low"].arn,
    ]
  }

  statement {
    sid = "ReconcileDeadLetters"
    actions = [
      "sqs:ReceiveMessage",
      "sqs:DeleteMessage",
      "sqs:GetQueueAttributes",
    ]
    resources = [
      aws_sqs_queue.dlq["high"].arn,
      aws_sqs_queue.dlq["normal"].arn,
      aws_sqs_queue.dlq["low"].arn,
    ]
  }

  statement {
    sid     = "Redrive"
    actions = ["sqs:StartMessageMoveTask", "sqs:ListMessageMoveTasks"]
    resources = [
      aws_sqs_queue.dlq["high"].arn,
      aws_sqs_queue.dlq["normal"].arn,
      aws_sqs_queue.dlq["low"].arn,
    ]
  }

  # The alerts it delivers, on the alerts' bus only (alerts.tf; when enabled). The
  # sweeper alone delivers: the workers and the API only write the alert rows.
  dynamic "statement" {
    for_each = aws_cloudwatch_event_bus.alerts
    content {
      sid       = "PutAlertEvents"
      actions   = ["events:PutEvents"]
      resources = [statement.value.arn]
    }
  }
}

# The migrate function touches no queue: the database secret (db_secret, below) and
# its logs are all it gets.
data "aws_iam_policy_document" "migrate" {}

locals {
  function_policies = {
    api     = data.aws_iam_policy_document.api.json
    worker  = data.aws_iam_policy_document.worker.json
    sweeper = data.aws_iam_policy_document.sweeper.json
    migrate = data.aws_iam_policy_document.migrate.json
  }
}

data "aws_iam_policy_document" "fn" {
  for_each = local.functions

  source_policy_documents = [
    local.function_policies[each.key],
    data.aws_iam_policy_document.db_secret.json,
    data.aws_iam_policy_document.logs[each.key].json,
  ]
}

resource "aws_iam_role_policy" "fn" {
  for_each = local.functions

  name   = "${var.name}-${each.key}"
  role   = aws_iam_role.fn[each.key].id
  policy = data.aws_iam_policy_document.fn[each.key].json
}

# --- VPC flow logs ------------------------------------------------------------------

data "aws_iam_policy_document" "flow_logs_assume" {
  statement {
    actions = ["sts:AssumeRole"]
    principals {
      type        = "Service"
      identifiers = ["vpc-flow-logs.amazonaws.com"]
    }
  }
}

resource "aws_iam_role" "flow_logs" {
  name               = "${var.name}-flow-logs"
  description        = "VPC flow logs of ${var.name} into CloudWatch Logs"
  assume_role_policy = data.aws_iam_policy_document.flow_logs_assume.json
}

data "aws_iam_policy_document" "flow_logs" {
  statement {
    actions = [
      "logs:CreateLogStream",
      "logs:PutLogEvents",
      "logs:DescribeLogGroups",
      "logs:DescribeLogStreams",
    ]
    resources = [aws_cloudwatch_log_group.flow_logs.arn, "${aws_cloudwatch_log_group.flow_logs.arn}:*"]
  }
}

resource "aws_iam_role_policy" "flow_logs" {
  name   = "${var.name}-flow-logs"
  role   = aws_iam_role.flow_logs.id
  policy = data.aws_iam_policy_document.flow_logs.json
}

# --- RDS enhanced monitoring ----------------------------------------------------------

data "aws_iam_policy_document" "rds_monitoring_assume" {
  statement {
    actions = ["sts:AssumeRole"]
    principals {
      type        = "Service"
      identifiers = ["monitoring.rds.amazonaws.com"]
    }
  }
}

resource "aws_iam_role" "rds_monitoring" {
  name               = "${var.name}-rds-monitoring"
  description        = "RDS enhanced monitoring of ${var.name}"
  assume_role_policy = data.aws_iam_policy_document.rds_monitoring_assume.json
}

resource "aws_iam_role_policy_attachment" "rds_monitoring" {
  role       = aws_iam_role.rds_monitoring.name
  policy_arn = "arn:${data.aws_partition.current.partition}:iam::aws:policy/service-role/AmazonRDSEnhancedMonitoringRole"
}
