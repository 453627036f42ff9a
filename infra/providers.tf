provider "aws" {
  region = var.aws_region
  # Only `make plan` sets this: its LocalStack runs SQS alone, without STS/IAM.
  skip_requesting_account_id = var.skip_requesting_account_id

  default_tags {
    tags = merge({ Project = "tasklease", ManagedBy = "terraform" }, var.tags)
  }
}

# Local lookups only (no API call), so `make plan` works against a LocalStack
# that runs nothing but SQS. aws_caller_identity would call STS: avoided on purpose.
data "aws_partition" "current" {}
