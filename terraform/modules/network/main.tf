# The network kvcm runs in: a VPC with private subnets (kvcm tasks and functions, Valkey, internal
# load balancers) and public subnets that hold only the NAT gateways, across availability zones;
# or an existing VPC and private subnets (create_vpc = false).

data "aws_availability_zones" "available" {
  #checkov:skip=CKV_AWS_394:Subnets are created once in the first az_count zones; a zone AWS adds later only changes the plan if az_count grows, which is when new zones are wanted.
  state = "available"

  lifecycle {
    precondition {
      condition     = var.create_vpc || (var.existing_vpc_id != null && length(var.existing_private_subnet_ids) >= 2)
      error_message = "create_vpc = false needs existing_vpc_id and at least two existing_private_subnet_ids (in different availability zones)."
    }
    precondition {
      condition     = !(var.create_vpc && var.enable_flow_logs) || var.flow_log_group_arn != null
      error_message = "enable_flow_logs needs flow_log_group_arn (the observability module's vpc_flow_logs log group)."
    }
  }
}

data "aws_region" "current" {}

data "aws_vpc" "existing" {
  count = var.create_vpc ? 0 : 1
  id    = var.existing_vpc_id
}

locals {
  azs = slice(data.aws_availability_zones.available.names, 0, var.az_count)
  # /20 private subnets from the start of the VPC, /24 public subnets from its last /20.
  private_cidrs = [for i in range(var.az_count) : cidrsubnet(var.vpc_cidr, 20 - tonumber(split("/", var.vpc_cidr)[1]), i)]
  public_cidrs  = [for i in range(var.az_count) : cidrsubnet(var.vpc_cidr, 24 - tonumber(split("/", var.vpc_cidr)[1]), pow(2, 24 - tonumber(split("/", var.vpc_cidr)[1])) - 1 - i)]
  nat_count     = var.create_vpc ? (var.single_nat_gateway ? 1 : var.az_count) : 0

  vpc_id             = var.create_vpc ? aws_vpc.this[0].id : var.existing_vpc_id
  vpc_cidr           = var.create_vpc ? aws_vpc.this[0].cidr_block : data.aws_vpc.existing[0].cidr_block
  private_subnet_ids = var.create_vpc ? aws_subnet.private[*].id : var.existing_private_subnet_ids
  private_rt_ids     = var.create_vpc ? aws_route_table.private[*].id : []

  interface_endpoints = var.enable_interface_endpoints ? toset(["secretsmanager", "ecr.api", "ecr.dkr", "logs", "kms"]) : toset([])
}

resource "aws_vpc" "this" {
  count = var.create_vpc ? 1 : 0

  cidr_block           = var.vpc_cidr
  enable_dns_support   = true
  enable_dns_hostnames = true

  tags = merge(var.tags, { Name = var.name })
}

# The default security group of the VPC allows nothing; every resource gets its own group.
resource "aws_default_security_group" "this" {
  count  = var.create_vpc ? 1 : 0
  vpc_id = aws_vpc.this[0].id
  tags   = merge(var.tags, { Name = "${var.name}-default-deny" })
}

resource "aws_flow_log" "this" {
  count = var.create_vpc && var.enable_flow_logs ? 1 : 0

  vpc_id                   = aws_vpc.this[0].id
  traffic_type             = "ALL"
  log_destination_type     = "cloud-watch-logs"
  log_destination          = var.flow_log_group_arn
  iam_role_arn             = aws_iam_role.flow_logs[0].arn
  max_aggregation_interval = 60
  tags                     = var.tags
}

data "aws_iam_policy_document" "flow_logs_assume" {
  statement {
    actions = ["sts:AssumeRole"]
    principals {
      type        = "Service"
      identifiers = ["vpc-flow-logs.amazonaws.com"]
    }
  }
}

resource "aws_iam_role" "flow_logs" {
  count              = var.create_vpc && var.enable_flow_logs ? 1 : 0
  name               = "${var.name}-vpc-flow-logs"
  assume_role_policy = data.aws_iam_policy_document.flow_logs_assume.json
  tags               = var.tags
}

data "aws_iam_policy_document" "flow_logs" {
  statement {
    sid       = "WriteFlowLogs"
    actions   = ["logs:CreateLogStream", "logs:PutLogEvents", "logs:DescribeLogStreams"]
    resources = var.flow_log_group_arn == null ? [] : [var.flow_log_group_arn, "${var.flow_log_group_arn}:*"]
  }
}

resource "aws_iam_role_policy" "flow_logs" {
  count  = var.create_vpc && var.enable_flow_logs ? 1 : 0
  name   = "write-flow-logs"
  role   = aws_iam_role.flow_logs[0].id
  policy = data.aws_iam_policy_document.flow_logs.json
}

resource "aws_internet_gateway" "this" {
  count  = var.create_vpc ? 1 : 0
  vpc_id = aws_vpc.this[0].id
  tags   = merge(var.tags, { Name = var.name })
}

# Public subnets hold the NAT gateways only: nothing of kvcm is placed in them.
resource "aws_subnet" "public" {
  count = var.create_vpc ? var.az_count : 0

  vpc_id                  = aws_vpc.this[0].id
  cidr_block              = local.public_cidrs[count.index]
  availability_zone       = local.azs[count.index]
  map_public_ip_on_launch = false

  tags = merge(var.tags, { Name = "${var.name}-public-${local.azs[count.index]}", Tier = "public" })
}

resource "aws_route_table" "public" {
  count  = var.create_vpc ? 1 : 0
  vpc_id = aws_vpc.this[0].id
  tags   = merge(var.tags, { Name = "${var.name}-public" })
}

resource "aws_route" "public_internet" {
  count                  = var.create_vpc ? 1 : 0
  route_table_id         = aws_route_table.public[0].id
  destination_cidr_block = "0.0.0.0/0"
  gateway_id             = aws_internet_gateway.this[0].id
}

resource "aws_route_table_association" "public" {
  count          = var.create_vpc ? var.az_count : 0
  subnet_id      = aws_subnet.public[count.index].id
  route_table_id = aws_route_table.public[0].id
}

resource "aws_eip" "nat" {
  count  = local.nat_count
  domain = "vpc"
  tags   = merge(var.tags, { Name = "${var.name}-nat-${count.index}" })
}

resource "aws_nat_gateway" "this" {
  count         = local.nat_count
  allocation_id = aws_eip.nat[count.index].id
  subnet_id     = aws_subnet.public[count.index].id
  tags          = merge(var.tags, { Name = "${var.name}-nat-${count.index}" })

  depends_on = [aws_internet_gateway.this]
}

resource "aws_subnet" "private" {
  count = var.create_vpc ? var.az_count : 0

  vpc_id            = aws_vpc.this[0].id
  cidr_block        = local.private_cidrs[count.index]
  availability_zone = local.azs[count.index]

  tags = merge(var.tags, { Name = "${var.name}-private-${local.azs[count.index]}", Tier = "private" })
}

resource "aws_route_table" "private" {
  count  = var.create_vpc ? var.az_count : 0
  vpc_id = aws_vpc.this[0].id
  tags   = merge(var.tags, { Name = "${var.name}-private-${local.azs[count.index]}" })
}

resource "aws_route" "private_nat" {
  count                  = var.create_vpc ? var.az_count : 0
  route_table_id         = aws_route_table.private[count.index].id
  destination_cidr_block = "0.0.0.0/0"
  nat_gateway_id         = aws_nat_gateway.this[var.single_nat_gateway ? 0 : count.index].id
}

resource "aws_route_table_association" "private" {
  count          = var.create_vpc ? var.az_count : 0
  subnet_id      = aws_subnet.private[count.index].id
  route_table_id = aws_route_table.private[count.index].id
}

# ECR keeps image layers in S3: a gateway endpoint keeps image pulls off the NAT gateway.
resource "aws_vpc_endpoint" "s3" {
  count             = var.create_vpc ? 1 : 0
  vpc_id            = aws_vpc.this[0].id
  service_name      = "com.amazonaws.${data.aws_region.current.region}.s3"
  vpc_endpoint_type = "Gateway"
  route_table_ids   = local.private_rt_ids
  tags              = merge(var.tags, { Name = "${var.name}-s3" })
}

resource "aws_security_group" "endpoints" {
  count       = length(local.interface_endpoints) > 0 ? 1 : 0
  name        = "${var.name}-vpc-endpoints"
  description = "HTTPS from inside the VPC to the AWS service endpoints"
  vpc_id      = local.vpc_id
  tags        = merge(var.tags, { Name = "${var.name}-vpc-endpoints" })
}

resource "aws_vpc_security_group_ingress_rule" "endpoints_https" {
  count             = length(local.interface_endpoints) > 0 ? 1 : 0
  security_group_id = aws_security_group.endpoints[0].id
  description       = "HTTPS from the VPC"
  ip_protocol       = "tcp"
  from_port         = 443
  to_port           = 443
  cidr_ipv4         = local.vpc_cidr
}

resource "aws_vpc_endpoint" "interface" {
  for_each = local.interface_endpoints

  vpc_id              = local.vpc_id
  service_name        = "com.amazonaws.${data.aws_region.current.region}.${each.key}"
  vpc_endpoint_type   = "Interface"
  private_dns_enabled = true
  subnet_ids          = local.private_subnet_ids
  security_group_ids  = [aws_security_group.endpoints[0].id]
  tags                = merge(var.tags, { Name = "${var.name}-${each.key}" })
}
