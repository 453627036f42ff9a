terraform {
  # 1.5 for `check` blocks; preconditions and optional attributes are older.
  required_version = ">= 1.5.0"

  required_providers {
    aws = {
      source  = "hashicorp/aws"
      version = "~> 5.0"
    }
  }
}
