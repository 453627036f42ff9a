# Alerts (docs/howto/alerts.md): the sweeper puts each alert (a dead letter, a stalled job,
# the DLQ over its threshold, the oldest queued job past its age, a tenant's token budget
# used up) on an EventBridge bus of its own, as Lambda durable functions publish their
# status changes. Rules on the bus send them on: SNS, Chatbot to Slack, an API destination
# (a webhook with EventBridge's own auth and retries), another account.
#
# Off by default: the bus is free, but the Lambdas live in private subnets and reach
# EventBridge through an interface endpoint, which costs by the hour (or through the NAT
# gateway when enable_nat_gateway is on: then no endpoint is made).
# The deployment-wide signed webhook (TASKLEASE_ALERT_WEBHOOK_URL and its secret) is not
# set here: the function environment holds no secret. Tenants' webhooks live in the
# database (`tasklease alerts set-webhook`) and need enable_nat_gateway to be reached.

resource "aws_cloudwatch_event_bus" "alerts" {
  count = var.enable_alert_event_bus ? 1 : 0
  name  = "${var.name}-alerts"
}

resource "aws_vpc_endpoint" "events" {
  count = var.enable_alert_event_bus && !var.enable_nat_gateway ? 1 : 0

  vpc_id              = aws_vpc.main.id
  service_name        = "com.amazonaws.${var.aws_region}.events"
  vpc_endpoint_type   = "Interface"
  subnet_ids          = aws_subnet.private[*].id
  security_group_ids  = [aws_security_group.endpoints.id]
  private_dns_enabled = true

  tags = { Name = "${var.name}-events" }
}

locals {
  # What the sweeper (which measures the thresholds and delivers the alerts) is told.
  alert_env = merge(
    var.enable_alert_event_bus ? { TASKLEASE_ALERT_EVENT_BUS = aws_cloudwatch_event_bus.alerts[0].name } : {},
    var.alert_dlq_threshold == null ? {} : { TASKLEASE_ALERT_DLQ_THRESHOLD = tostring(var.alert_dlq_threshold) },
    var.alert_oldest_queued_seconds == null ? {} : { TASKLEASE_ALERT_OLDEST_QUEUED_SECONDS = tostring(var.alert_oldest_queued_seconds) },
  )
}
