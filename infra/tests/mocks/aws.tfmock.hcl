# The mock AWS provider every `terraform test` file plans against (Terraform >= 1.7
# reads it through `mock_provider "aws" { source = "./tests/mocks" }`).

# The real provider validates policy JSON even in a plan.
mock_data "aws_iam_policy_document" {
  defaults = { json = "{\"Version\":\"2012-10-17\",\"Statement\":[]}" }
}
mock_data "aws_partition" {
  defaults = { partition = "aws" }
}
mock_resource "aws_db_instance" {
  defaults = {
    master_user_secret = [{ secret_arn = "arn:aws:secretsmanager:us-east-1:123456789012:secret:db", kms_key_id = "", secret_status = "active" }]
  }
}
