# A job in the DLQ needs a human (or a redrive); an old message on the source
# means the workers are not keeping up, or are failing before they claim.

resource "aws_cloudwatch_metric_alarm" "dlq_depth" {
  for_each          = local.priorities
  alarm_name        = each.key == "normal" ? "${var.name}-dlq-not-empty" : "${var.name}-${each.key}-dlq-not-empty"
  alarm_description = "Messages in ${each.value.dlq_name}: jobs were dead-lettered. Inspect with `tasklease dlq list`, fix the cause, then redrive."

  namespace   = "AWS/SQS"
  metric_name = "ApproximateNumberOfMessagesVisible"
  dimensions  = { QueueName = aws_sqs_queue.dlq[each.key].name }
  statistic   = "Maximum"
  period      = 60

  evaluation_periods  = 1
  comparison_operator = "GreaterThanThreshold"
  threshold           = 0
  # SQS stops sending metrics for a queue that is inactive for six hours.
  treat_missing_data = "notBreaching"

  alarm_actions = var.alarm_actions
  ok_actions    = var.alarm_actions
}

moved {
  from = aws_cloudwatch_metric_alarm.dlq_depth
  to   = aws_cloudwatch_metric_alarm.dlq_depth["normal"]
}

resource "aws_cloudwatch_metric_alarm" "source_oldest_message" {
  for_each          = local.priorities
  alarm_name        = each.key == "normal" ? "${var.name}-oldest-message-age" : "${var.name}-${each.key}-oldest-message-age"
  alarm_description = "The oldest message on ${each.value.queue_name} is older than ${var.oldest_message_alarm_seconds} s: workers are behind, throttled, or failing before the claim."

  namespace   = "AWS/SQS"
  metric_name = "ApproximateAgeOfOldestMessage"
  dimensions  = { QueueName = aws_sqs_queue.source[each.key].name }
  statistic   = "Maximum"
  period      = 60

  evaluation_periods  = 5
  datapoints_to_alarm = 5
  comparison_operator = "GreaterThanThreshold"
  threshold           = var.oldest_message_alarm_seconds
  treat_missing_data  = "notBreaching"

  alarm_actions = var.alarm_actions
  ok_actions    = var.alarm_actions
}

moved {
  from = aws_cloudwatch_metric_alarm.dlq_depth
  to   = aws_cloudwatch_metric_alarm.dlq_depth["normal"]
}

moved {
  from = aws_cloudwatch_metric_alarm.source_oldest_message
  to   = aws_cloudwatch_metric_alarm.source_oldest_message["normal"]
}
