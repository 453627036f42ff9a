terraform {
  # 1.9: variable validations that refer to other variables (api_auth_mode needs
  # jwt_issuer, ...); preconditions and optional attributes are older.
  required_version = ">= 1.9.0"

  required_providers {
    aws = {
      source  = "hashicorp/aws"
      version = "~> 5.0"
    }
  }
}
