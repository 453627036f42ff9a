# PostgreSQL, the truth of every job. Private subnets only; RDS generates the
# master password and keeps it in Secrets Manager (manage_master_user_password).

resource "aws_db_subnet_group" "main" {
  name        = var.name
  description = "Private subnets of ${var.name}"
  subnet_ids  = aws_subnet.private[*].id
}

resource "aws_db_parameter_group" "main" {
  name        = "${var.name}-postgres${var.db_engine_version}"
  family      = "postgres${var.db_engine_version}"
  description = "tasklease: TLS only, slow and DDL statements logged"

  # Clients must use TLS (the functions connect with sslmode=require).
  parameter {
    name  = "rds.force_ssl"
    value = "1"
  }

  # Log DDL (migrations) and any statement slower than 1 s (CKV2_AWS_30).
  parameter {
    name  = "log_statement"
    value = "ddl"
  }

  parameter {
    name  = "log_min_duration_statement"
    value = "1000"
  }

  lifecycle {
    create_before_destroy = true
  }
}

resource "aws_db_instance" "main" {
  #checkov:skip=CKV_AWS_157:Multi-AZ is the deployment_profile's (production: on; small: off, as it doubles the database's cost) or var.db_multi_az
  #checkov:skip=CKV_AWS_354:Performance Insights data is encrypted with the AWS-managed aws/rds key; a customer-managed key is left to the operator (infra/README.md)
  identifier     = var.name
  engine         = "postgres"
  engine_version = var.db_engine_version
  instance_class = var.db_instance_class

  allocated_storage     = var.db_allocated_storage_gb
  max_allocated_storage = var.db_max_allocated_storage_gb
  storage_type          = "gp3"
  storage_encrypted     = true

  db_name                     = var.db_name
  username                    = var.db_username
  manage_master_user_password = true
  # IAM authentication is available to operators; the functions use the secret.
  iam_database_authentication_enabled = true

  db_subnet_group_name   = aws_db_subnet_group.main.name
  vpc_security_group_ids = [aws_security_group.db.id]
  publicly_accessible    = false
  multi_az               = local.db_multi_az
  parameter_group_name   = aws_db_parameter_group.main.name

  backup_retention_period   = var.db_backup_retention_days
  copy_tags_to_snapshot     = true
  deletion_protection       = var.db_deletion_protection
  skip_final_snapshot       = false
  final_snapshot_identifier = "${var.name}-final"

  auto_minor_version_upgrade      = true
  enabled_cloudwatch_logs_exports = ["postgresql", "upgrade"]
  performance_insights_enabled    = true
  monitoring_interval             = 60
  monitoring_role_arn             = aws_iam_role.rds_monitoring.arn

  lifecycle {
    precondition {
      condition     = var.db_max_allocated_storage_gb > var.db_allocated_storage_gb
      error_message = "db_max_allocated_storage_gb must be above db_allocated_storage_gb."
    }
  }

  depends_on = [aws_iam_role_policy_attachment.rds_monitoring]
}
