# The VPC: private subnets for RDS and the Lambdas. How the functions reach SQS,
# Secrets Manager and the internet is the deployment_profile's (locals.tf):
#   production: interface endpoints for SQS and Secrets Manager, and with
#     enable_nat_gateway a NAT gateway per availability zone for the kinds that call out;
#   small: dual-stack subnets and an egress-only internet gateway (no hourly charge):
#     SQS's and Secrets Manager's public endpoints and a model provider over IPv6; with
#     enable_nat_gateway one NAT gateway for an IPv4-only provider or webhook.

resource "aws_vpc" "main" {
  cidr_block = var.vpc_cidr
  # Interface endpoints with private DNS need both.
  enable_dns_support   = true
  enable_dns_hostnames = true
  # small: an Amazon-provided /56, for the egress-only internet gateway's route.
  assign_generated_ipv6_cidr_block = local.profile.ipv6_egress

  tags = { Name = var.name }
}

# No rules: nothing may use the default security group (CKV2_AWS_12).
resource "aws_default_security_group" "main" {
  vpc_id = aws_vpc.main.id
}

resource "aws_subnet" "private" {
  count = length(local.azs)

  vpc_id            = aws_vpc.main.id
  availability_zone = local.azs[count.index]
  cidr_block        = cidrsubnet(var.vpc_cidr, 8, count.index)
  ipv6_cidr_block   = local.profile.ipv6_egress ? cidrsubnet(aws_vpc.main.ipv6_cidr_block, 8, count.index) : null

  tags = { Name = "${var.name}-private-${local.azs[count.index]}" }
}

# One route table per zone: with a NAT gateway per zone (production), each zone's
# subnet goes out through its own.
resource "aws_route_table" "private" {
  count = length(local.azs)

  vpc_id = aws_vpc.main.id
  tags   = { Name = "${var.name}-private-${local.azs[count.index]}" }
}

resource "aws_route_table_association" "private" {
  count = length(local.azs)

  subnet_id      = aws_subnet.private[count.index].id
  route_table_id = aws_route_table.private[count.index].id
}

# --- small: outbound IPv6 (no inbound) --------------------------------------------

resource "aws_egress_only_internet_gateway" "main" {
  count = local.profile.ipv6_egress ? 1 : 0

  vpc_id = aws_vpc.main.id
  tags   = { Name = var.name }
}

resource "aws_route" "private_ipv6" {
  count = local.profile.ipv6_egress ? length(local.azs) : 0

  route_table_id              = aws_route_table.private[count.index].id
  destination_ipv6_cidr_block = "::/0"
  egress_only_gateway_id      = aws_egress_only_internet_gateway.main[0].id
}

# --- optional way out to the internet (enable_nat_gateway) ------------------------

resource "aws_subnet" "public" {
  count = var.enable_nat_gateway ? length(local.azs) : 0

  vpc_id                  = aws_vpc.main.id
  availability_zone       = local.azs[count.index]
  cidr_block              = cidrsubnet(var.vpc_cidr, 8, 100 + count.index)
  map_public_ip_on_launch = false

  tags = { Name = "${var.name}-public-${local.azs[count.index]}" }
}

resource "aws_internet_gateway" "main" {
  count  = var.enable_nat_gateway ? 1 : 0
  vpc_id = aws_vpc.main.id
  tags   = { Name = var.name }
}

resource "aws_eip" "nat" {
  count  = local.nat_gateways
  domain = "vpc"
  tags   = { Name = "${var.name}-nat" }
}

# production: one NAT gateway per zone, so a zone's outage leaves the other zone's
# functions their way out; small: one (a zone outage then costs the other zone's
# outbound calls, which the job's own retry policy retries: latency, not jobs).
resource "aws_nat_gateway" "main" {
  count         = local.nat_gateways
  allocation_id = aws_eip.nat[count.index].id
  subnet_id     = aws_subnet.public[count.index].id
  tags          = { Name = var.name }

  depends_on = [aws_internet_gateway.main]
}

resource "aws_route_table" "public" {
  count  = var.enable_nat_gateway ? 1 : 0
  vpc_id = aws_vpc.main.id

  route {
    cidr_block = "0.0.0.0/0"
    gateway_id = aws_internet_gateway.main[0].id
  }

  tags = { Name = "${var.name}-public" }
}

resource "aws_route_table_association" "public" {
  count = var.enable_nat_gateway ? length(local.azs) : 0

  subnet_id      = aws_subnet.public[count.index].id
  route_table_id = aws_route_table.public[0].id
}

resource "aws_route" "private_nat" {
  count = var.enable_nat_gateway ? length(local.azs) : 0

  route_table_id         = aws_route_table.private[count.index].id
  destination_cidr_block = "0.0.0.0/0"
  nat_gateway_id         = aws_nat_gateway.main[local.nat_gateways > 1 ? count.index : 0].id
}

# --- security groups ------------------------------------------------------------------

resource "aws_security_group" "lambda" {
  name        = "${var.name}-lambda"
  description = "tasklease Lambda functions: egress to the database, the VPC endpoints and (with NAT) HTTPS"
  vpc_id      = aws_vpc.main.id
}

resource "aws_security_group" "endpoints" {
  name        = "${var.name}-endpoints"
  description = "Interface VPC endpoints (SQS, Secrets Manager): HTTPS from the functions"
  vpc_id      = aws_vpc.main.id
}

resource "aws_security_group" "db" {
  name        = "${var.name}-db"
  description = "RDS PostgreSQL: port 5432 from the functions only"
  vpc_id      = aws_vpc.main.id
}

resource "aws_vpc_security_group_egress_rule" "lambda_to_db" {
  security_group_id            = aws_security_group.lambda.id
  description                  = "PostgreSQL"
  ip_protocol                  = "tcp"
  from_port                    = 5432
  to_port                      = 5432
  referenced_security_group_id = aws_security_group.db.id
}

resource "aws_vpc_security_group_egress_rule" "lambda_to_endpoints" {
  security_group_id            = aws_security_group.lambda.id
  description                  = "HTTPS to the SQS and Secrets Manager endpoints"
  ip_protocol                  = "tcp"
  from_port                    = 443
  to_port                      = 443
  referenced_security_group_id = aws_security_group.endpoints.id
}

resource "aws_vpc_security_group_egress_rule" "lambda_to_internet" {
  count = var.enable_nat_gateway ? 1 : 0

  security_group_id = aws_security_group.lambda.id
  description       = "HTTPS through the NAT gateway (model provider, webhooks)"
  ip_protocol       = "tcp"
  from_port         = 443
  to_port           = 443
  cidr_ipv4         = "0.0.0.0/0"
}

resource "aws_vpc_security_group_egress_rule" "lambda_to_internet_ipv6" {
  count = local.profile.ipv6_egress ? 1 : 0

  security_group_id = aws_security_group.lambda.id
  description       = "HTTPS over IPv6 through the egress-only internet gateway (SQS, Secrets Manager, model provider, webhooks)"
  ip_protocol       = "tcp"
  from_port         = 443
  to_port           = 443
  cidr_ipv6         = "::/0"
}

resource "aws_vpc_security_group_ingress_rule" "endpoints_from_lambda" {
  security_group_id            = aws_security_group.endpoints.id
  description                  = "HTTPS from the functions"
  ip_protocol                  = "tcp"
  from_port                    = 443
  to_port                      = 443
  referenced_security_group_id = aws_security_group.lambda.id
}

resource "aws_vpc_security_group_ingress_rule" "db_from_lambda" {
  security_group_id            = aws_security_group.db.id
  description                  = "PostgreSQL from the functions"
  ip_protocol                  = "tcp"
  from_port                    = 5432
  to_port                      = 5432
  referenced_security_group_id = aws_security_group.lambda.id
}

# --- interface endpoints ------------------------------------------------------------

resource "aws_vpc_endpoint" "interface" {
  # production only: in small the functions reach both over IPv6 (their public
  # endpoints are dual-stack), which saves 2 endpoints x 2 zones of hourly charges.
  for_each = local.profile.interface_endpoints ? toset(["sqs", "secretsmanager"]) : toset([])

  vpc_id              = aws_vpc.main.id
  service_name        = "com.amazonaws.${var.aws_region}.${each.key}"
  vpc_endpoint_type   = "Interface"
  subnet_ids          = aws_subnet.private[*].id
  security_group_ids  = [aws_security_group.endpoints.id]
  private_dns_enabled = true

  tags = { Name = "${var.name}-${each.key}" }
}

# --- flow logs (CKV2_AWS_11) ------------------------------------------------------------

resource "aws_cloudwatch_log_group" "flow_logs" {
  #checkov:skip=CKV_AWS_158:encrypted by CloudWatch Logs' own key; a customer-managed KMS key needs an account-specific key policy, left to the operator (infra/README.md)
  name              = "/aws/vpc/${var.name}-flow-logs"
  retention_in_days = var.log_retention_days
}

resource "aws_flow_log" "main" {
  vpc_id = aws_vpc.main.id
  # Rejected traffic is what explains a function that cannot reach the database or
  # an endpoint; ALL would log every poll of the queue.
  traffic_type    = "REJECT"
  log_destination = aws_cloudwatch_log_group.flow_logs.arn
  iam_role_arn    = aws_iam_role.flow_logs.arn
}
