"""AWS quotas tasklease validates against, each with the page it comes from.

https://docs.aws.amazon.com/AWSSimpleQueueService/latest/SQSDeveloperGuide/quotas-messages.html
https://docs.aws.amazon.com/AWSSimpleQueueService/latest/SQSDeveloperGuide/quotas-queues.html
https://docs.aws.amazon.com/lambda/latest/dg/gettingstarted-limits.html
"""

# ReceiveMessage MaxNumberOfMessages and the entries of a *Batch call.
MAX_BATCH = 10
# ReceiveMessage WaitTimeSeconds: long polling waits at most 20 s.
MAX_WAIT_SECONDS = 20
# VisibilityTimeout and ChangeMessageVisibility: 12 hours from the first receive.
MAX_VISIBILITY_SECONDS = 12 * 3600
# DelaySeconds on SendMessage: at most 15 minutes.
MAX_DELAY_SECONDS = 15 * 60
# MessageRetentionPeriod: 60 s to 14 days.
MIN_RETENTION_SECONDS = 60
MAX_RETENTION_SECONDS = 14 * 24 * 3600
# A queue's name: at most 80 characters (alphanumerics, hyphens, underscores).
MAX_QUEUE_NAME_CHARS = 80
# RedrivePolicy maxReceiveCount: 1 to 1,000.
MAX_RECEIVE_COUNT = 1000
# Lambda function timeout: 15 minutes.
MAX_LAMBDA_TIMEOUT_SECONDS = 15 * 60
# API Gateway's request payload: 10 MB (quotas of HTTP APIs).
# https://docs.aws.amazon.com/apigateway/latest/developerguide/http-api-quotas.html
MAX_API_GATEWAY_PAYLOAD_BYTES = 10 * 1024 * 1024
