# runtime = "lambda": kvcm-api as two functions from the same container image, each serving one
# plane (KVCM_LAMBDA_PLANE): "meta" behind an API Gateway HTTP API, "admin" behind the internal
# admin ALB (main.tf). Both run in the private subnets (Valkey is only reachable there).
#
# Secrets: the functions' environment holds only the secrets' ARNs (SECRET_ARNS); the image's
# entrypoint (infra/docker/kvcm-entrypoint.sh) fetches the values at cold start with the
# function's role. No secret value is in the function configuration.

locals {
  lambda_planes = var.runtime == "lambda" ? toset(["meta", "admin"]) : toset([])
  lambda        = var.runtime == "lambda" ? 1 : 0
  secret_arns   = join(" ", [for k in sort(keys(local.secrets)) : "${k}=${local.secrets[k]}"])
}

resource "aws_security_group" "lambda" {
  count       = local.lambda
  name        = "${var.name}-api-lambda"
  description = "kvcm-api Lambda functions: no inbound; HTTPS out to AWS APIs, Valkey through the clients group"
  vpc_id      = var.vpc_id
  tags        = merge(var.tags, { Name = "${var.name}-api-lambda" })
}

resource "aws_vpc_security_group_egress_rule" "lambda_https" {
  count             = local.lambda
  security_group_id = aws_security_group.lambda[0].id
  description       = "HTTPS to AWS APIs (Secrets Manager) through the VPC endpoints or NAT"
  ip_protocol       = "tcp"
  from_port         = 443
  to_port           = 443
  cidr_ipv4         = "0.0.0.0/0"
}

# ---- IAM: one role per function ----

data "aws_iam_policy_document" "lambda_assume" {
  statement {
    actions = ["sts:AssumeRole"]
    principals {
      type        = "Service"
      identifiers = ["lambda.amazonaws.com"]
    }
    condition {
      test     = "StringEquals"
      variable = "aws:SourceAccount"
      values   = [local.account]
    }
  }
}

resource "aws_iam_role" "lambda" {
  for_each           = local.lambda_planes
  name               = "${var.name}-api-${each.key}"
  description        = "kvcm-api ${each.key}-plane function: logs, VPC network interfaces, tracing, its two secrets"
  assume_role_policy = data.aws_iam_policy_document.lambda_assume.json
  tags               = var.tags
}

data "aws_iam_policy_document" "lambda" {
  #checkov:skip=CKV_AWS_111:Only ec2:CreateNetworkInterface has "*": Lambda verifies it unscoped when it attaches the function to the VPC; the other write actions are scoped to this account's network interfaces.
  #checkov:skip=CKV_AWS_356:"*" only for ec2:CreateNetworkInterface (see above) and for actions without resource-level permissions (ec2:Describe*, xray:Put*).
  for_each = local.lambda_planes

  statement {
    sid       = "WriteItsLogs"
    actions   = ["logs:CreateLogStream", "logs:PutLogEvents"]
    resources = ["${var.lambda_log_group_arns[each.key]}:*"]
  }
  statement {
    # Lambda checks these without a resource when it attaches the function to the VPC, and
    # EC2's Describe calls have no resource-level permissions.
    sid       = "AttachToTheVpc"
    actions   = ["ec2:CreateNetworkInterface", "ec2:DescribeNetworkInterfaces", "ec2:DescribeSubnets"]
    resources = ["*"]
  }
  statement {
    sid       = "ManageItsNetworkInterfaces"
    actions   = ["ec2:AssignPrivateIpAddresses", "ec2:DeleteNetworkInterface", "ec2:UnassignPrivateIpAddresses"]
    resources = ["${local.arn_pfx}:ec2:${local.region}:${local.account}:network-interface/*"]
  }
  statement {
    sid       = "Tracing"
    actions   = ["xray:PutTelemetryRecords", "xray:PutTraceSegments"] # no resource-level permissions
    resources = ["*"]
  }
  statement {
    sid       = "ReadItsSecrets"
    actions   = ["secretsmanager:GetSecretValue"]
    resources = values(local.secrets)
  }
  statement {
    sid       = "DecryptItsSecretsAndEnvironment"
    actions   = ["kms:Decrypt"]
    resources = local.secret_kms_key_arns
    condition {
      test     = "StringEquals"
      variable = "kms:ViaService"
      values   = ["secretsmanager.${local.region}.amazonaws.com", "lambda.${local.region}.amazonaws.com"]
    }
  }
}

resource "aws_iam_role_policy" "lambda" {
  for_each = local.lambda_planes
  name     = "kvcm-api-${each.key}"
  role     = aws_iam_role.lambda[each.key].id
  policy   = data.aws_iam_policy_document.lambda[each.key].json
}

# ---- the functions ----

resource "aws_lambda_function" "plane" {
  #checkov:skip=CKV_AWS_116:Invoked synchronously only (API Gateway, ALB): there is no asynchronous event to dead-letter.
  #checkov:skip=CKV_AWS_272:Code signing applies to .zip packages; this is a container image pinned by tag or digest in ECR.
  for_each = local.lambda_planes

  function_name                  = "${var.name}-${each.key}"
  description                    = "kvcm-api, ${each.key} plane"
  role                           = aws_iam_role.lambda[each.key].arn
  package_type                   = "Image"
  image_uri                      = var.image
  architectures                  = [var.architecture == "ARM64" ? "arm64" : "x86_64"]
  memory_size                    = var.lambda_memory_mb
  timeout                        = var.lambda_timeout_s
  reserved_concurrent_executions = each.key == "meta" ? var.lambda_reserved_concurrency : 10
  kms_key_arn                    = aws_kms_key.this.arn

  image_config {
    command = ["kvcm-api"]
  }

  environment {
    # client_ip_header is left out: in Lambda the event names the caller (API Gateway's
    # sourceIp; behind the ALB, the right-most X-Forwarded-For entry the ALB appended), and kvcm
    # ignores the setting there. The response bound keeps every reply inside what the trigger
    # can return (6 MB through API Gateway, 1 MB from an ALB target); kvcm refuses a request
    # whose reply would need more, before it runs, instead of the trigger answering a bare 502.
    variables = merge({ for k, v in local.environment : k => v if k != "KVCM_CLIENT_IP_HEADER" }, {
      KVCM_LAMBDA_PLANE                    = each.key
      SECRET_ARNS                          = local.secret_arns
      KVCM_MAX_LOCATION_SPECS_PER_RESPONSE = tostring(each.key == "meta" ? var.lambda_max_location_specs_per_response : min(var.lambda_max_location_specs_per_response, 5000))
    })
  }

  vpc_config {
    subnet_ids         = var.subnet_ids
    security_group_ids = [aws_security_group.lambda[0].id, var.valkey_client_security_group_id]
  }

  tracing_config {
    mode = "Active"
  }

  logging_config {
    log_format = "Text"
    log_group  = var.lambda_log_group_names[each.key]
  }

  depends_on = [aws_iam_role_policy.lambda]

  tags = var.tags
}

# ---- meta plane: API Gateway HTTP API ----

resource "aws_apigatewayv2_api" "meta" {
  count         = local.lambda
  name          = "${var.name}-meta"
  description   = "kvcm meta plane (engines). kvcm authenticates every request itself (meta_auth)."
  protocol_type = "HTTP"
  tags          = var.tags
}

resource "aws_apigatewayv2_integration" "meta" {
  count                  = local.lambda
  api_id                 = aws_apigatewayv2_api.meta[0].id
  integration_type       = "AWS_PROXY"
  integration_uri        = aws_lambda_function.plane["meta"].invoke_arn
  payload_format_version = "2.0"
  timeout_milliseconds   = var.lambda_timeout_s * 1000
}

# Only the meta plane's routes: RPCs and the health check. Nothing of the admin plane.
resource "aws_apigatewayv2_route" "meta" {
  #checkov:skip=CKV_AWS_309:kvcm authenticates every meta-plane request itself (meta_auth = true: API keys scoped to instance groups); connectors send kvcm credentials, not AWS ones.
  for_each = var.runtime == "lambda" ? toset(["POST /api/{rpc}", "GET /api/healthy"]) : toset([])

  api_id             = aws_apigatewayv2_api.meta[0].id
  route_key          = each.value
  target             = "integrations/${aws_apigatewayv2_integration.meta[0].id}"
  authorization_type = "NONE"
}

resource "aws_apigatewayv2_stage" "meta" {
  count       = local.lambda
  api_id      = aws_apigatewayv2_api.meta[0].id
  name        = "$default"
  auto_deploy = true

  default_route_settings {
    throttling_rate_limit  = var.api_throttling_rate_limit
    throttling_burst_limit = var.api_throttling_burst_limit
  }

  access_log_settings {
    destination_arn = var.apigw_access_log_group_arn
    format = jsonencode({
      requestId      = "$context.requestId"
      sourceIp       = "$context.identity.sourceIp"
      requestTime    = "$context.requestTime"
      routeKey       = "$context.routeKey"
      status         = "$context.status"
      latencyMs      = "$context.responseLatency"
      integrationErr = "$context.integrationErrorMessage"
    })
  }

  tags = var.tags
}

resource "aws_lambda_permission" "meta_from_apigw" {
  count         = local.lambda
  statement_id  = "AllowMetaHttpApi"
  action        = "lambda:InvokeFunction"
  function_name = aws_lambda_function.plane["meta"].function_name
  principal     = "apigateway.amazonaws.com"
  source_arn    = "${aws_apigatewayv2_api.meta[0].execution_arn}/*/*"
}

# ---- admin plane: the internal admin ALB invokes the admin function ----

resource "aws_lb_target_group" "admin_lambda" {
  count       = local.lambda
  name        = "${var.name}-admin-fn"
  target_type = "lambda"

  health_check {
    enabled  = true
    path     = "/api/healthy"
    matcher  = "200"
    interval = 60
    timeout  = 30
  }

  tags = var.tags
}

resource "aws_lambda_permission" "admin_from_alb" {
  count         = local.lambda
  statement_id  = "AllowInternalAdminAlb"
  action        = "lambda:InvokeFunction"
  function_name = aws_lambda_function.plane["admin"].function_name
  principal     = "elasticloadbalancing.amazonaws.com"
  source_arn    = aws_lb_target_group.admin_lambda[0].arn
}

resource "aws_lb_target_group_attachment" "admin_lambda" {
  count            = local.lambda
  target_group_arn = aws_lb_target_group.admin_lambda[0].arn
  target_id        = aws_lambda_function.plane["admin"].arn
  depends_on       = [aws_lambda_permission.admin_from_alb]
}
