output "api_url" {
  description = "Base URL of the HTTP API (POST $api_url/v1/jobs)."
  value       = aws_apigatewayv2_stage.default.invoke_url
}

output "queue_url" {
  description = "URL of the source queue (TASKLEASE_QUEUE_URL)."
  value       = aws_sqs_queue.source["normal"].url
}

output "dlq_url" {
  description = "URL of the dead-letter queue (TASKLEASE_DLQ_URL)."
  value       = aws_sqs_queue.dlq["normal"].url
}

output "queue_arn" {
  description = "ARN of the source queue (the redrive destination)."
  value       = aws_sqs_queue.source["normal"].arn
}

output "dlq_arn" {
  description = "ARN of the dead-letter queue."
  value       = aws_sqs_queue.dlq["normal"].arn
}

output "priority_queue_urls" {
  description = "Every priority's source queue and DLQ (TASKLEASE_QUEUE_URL_HIGH, TASKLEASE_DLQ_URL_HIGH, TASKLEASE_QUEUE_URL_LOW, TASKLEASE_DLQ_URL_LOW, and the normal ones)."
  value = {
    for p in keys(local.priorities) : p => {
      queue_url = aws_sqs_queue.source[p].url
      dlq_url   = aws_sqs_queue.dlq[p].url
    }
  }
}

output "database_address" {
  description = "Host name of the PostgreSQL instance (reachable from inside the VPC only)."
  value       = aws_db_instance.main.address
}

output "database_secret_arn" {
  description = "ARN of the RDS-managed secret holding the master user's name and password."
  value       = aws_db_instance.main.master_user_secret[0].secret_arn
}

output "function_names" {
  description = "Lambda function names by role (api, worker, sweeper, migrate)."
  value       = { for k, f in aws_lambda_function.fn : k => f.function_name }
}

output "worker_version" {
  description = "The worker code's published version: set worker_drain_version to it before a deploy that drops a pinned kind version, to keep this code running its jobs."
  value       = aws_lambda_function.fn["worker"].version
}
