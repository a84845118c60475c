# kvcm-api: the meta plane (engines) and the admin plane (operators).
#
# runtime = "ecs":    one Fargate service serves both planes; the meta plane behind an internal
#                     ALB (meta_ingress_cidrs), the admin plane behind a second internal ALB
#                     (admin_ingress_cidrs). (ecs.tf)
# runtime = "lambda": the meta plane is a Lambda function behind an API Gateway HTTP API; the
#                     admin plane is a second function (KVCM_LAMBDA_PLANE=admin) behind the
#                     internal admin ALB, never behind API Gateway. (lambda.tf)
#
# Either way the admin plane is reachable only inside the VPC, from admin_ingress_cidrs, over
# HTTPS; the production configuration turns meta_auth on and bootstraps an admin whose
# generated password lives in Secrets Manager.

data "aws_caller_identity" "current" {}
data "aws_partition" "current" {}
data "aws_region" "current" {}

locals {
  account = data.aws_caller_identity.current.account_id
  region  = data.aws_region.current.region
  arn_pfx = "arn:${data.aws_partition.current.partition}"

  meta_port  = 6382
  admin_port = 6492

  # kvcm configuration (core/config/default.toml keys as KVCM_<KEY>), shared by the ECS tasks
  # and the Lambda functions. No secret here: the Valkey AUTH token and the bootstrap admin
  # password come from Secrets Manager (local.secrets).
  environment = merge(
    {
      KVCM_BIND                 = "0.0.0.0"
      KVCM_META_PORT            = tostring(local.meta_port)
      KVCM_ADMIN_PORT           = tostring(local.admin_port)
      KVCM_GRPC                 = "false" # the load balancer forwards HTTP only: no gRPC here (yet)
      KVCM_VALKEY_URL           = var.valkey_url
      KVCM_NAMESPACE            = var.namespace
      KVCM_LOG_FORMAT           = "json"
      KVCM_LOG_LEVEL            = var.log_level
      KVCM_META_AUTH            = "true"
      KVCM_BOOTSTRAP_ADMIN_USER = var.bootstrap_admin_user
      # Behind the ALB every client shares the balancer's address; it appends the client's to
      # X-Forwarded-For, and kvcm reads its right-most entry. (The Lambda functions leave this out:
      # there the event names the caller, lambda.tf.)
      KVCM_CLIENT_IP_HEADER = "x-forwarded-for"
      KVCM_IDLE_TIMEOUT_MS  = tostring((var.alb_idle_timeout + 15) * 1000)
    },
    var.startup_config == "" ? {} : { KVCM_STARTUP_CONFIG = var.startup_config },
    # Not a kvcm setting: changing it changes the task definition (and function configuration),
    # which is what makes a secret rotation reach every running process (secrets_version).
    { SECRETS_VERSION = tostring(var.secrets_version) },
    var.extra_environment,
  )

  # The ECS tasks' environment: one serving thread per vCPU of the task (kvcm's default counts
  # the CPUs it may run on, which under Fargate need not be the task's share; 256/512 units
  # still get one thread). The Lambda functions serve one request at a time and have none.
  # A KVCM_SERVING_THREADS in extra_environment wins.
  ecs_environment = merge({ KVCM_SERVING_THREADS = tostring(max(1, floor(var.cpu / 1024))) }, local.environment)

  # Secret environment variables -> Secrets Manager secret ARNs.
  secrets = {
    KVCM_VALKEY_PASSWORD          = var.valkey_auth_secret_arn
    KVCM_BOOTSTRAP_ADMIN_PASSWORD = aws_secretsmanager_secret.admin_password.arn
  }
  secret_kms_key_arns = [var.valkey_kms_key_arn, aws_kms_key.this.arn]
}

# ---- KMS key of the admin password secret and the Lambda environment ----

data "aws_iam_policy_document" "key_policy" {
  #checkov:skip=CKV_AWS_109:A key policy: "*" as resource means this key; the account root administers it.
  #checkov:skip=CKV_AWS_111:A key policy: "*" as resource means this key; the account root administers it.
  #checkov:skip=CKV_AWS_356:A key policy: "*" as resource means this key.
  statement {
    sid = "AccountAdministersKey"
    actions = [
      "kms:CancelKeyDeletion", "kms:CreateAlias", "kms:DeleteAlias", "kms:DescribeKey", "kms:DisableKey",
      "kms:DisableKeyRotation", "kms:EnableKey", "kms:EnableKeyRotation", "kms:GetKeyPolicy",
      "kms:GetKeyRotationStatus", "kms:ListAliases", "kms:ListGrants", "kms:ListKeyPolicies",
      "kms:ListResourceTags", "kms:PutKeyPolicy", "kms:RevokeGrant", "kms:RotateKeyOnDemand",
      "kms:ScheduleKeyDeletion", "kms:TagResource", "kms:UntagResource", "kms:UpdateAlias",
      "kms:UpdateKeyDescription",
    ]
    resources = ["*"]
    principals {
      type        = "AWS"
      identifiers = ["${local.arn_pfx}:iam::${local.account}:root"]
    }
  }

  statement {
    sid = "AccountUsesKeyThroughIam"
    actions = [
      "kms:CreateGrant", "kms:Decrypt", "kms:DescribeKey", "kms:Encrypt", "kms:GenerateDataKey",
      "kms:ReEncryptFrom", "kms:ReEncryptTo",
    ]
    resources = ["*"]
    principals {
      type        = "AWS"
      identifiers = ["${local.arn_pfx}:iam::${local.account}:root"]
    }
  }
}

resource "aws_kms_key" "this" {
  description             = "${var.name}: kvcm-api admin password secret and Lambda environment"
  enable_key_rotation     = true
  deletion_window_in_days = 30
  policy                  = data.aws_iam_policy_document.key_policy.json
  tags                    = var.tags
}

resource "aws_kms_alias" "this" {
  name          = "alias/${var.name}-api"
  target_key_id = aws_kms_key.this.key_id
}

# ---- the bootstrap admin's password: generated, in Secrets Manager ----

resource "random_password" "admin" {
  length  = 40
  special = false
}

resource "aws_secretsmanager_secret" "admin_password" {
  #checkov:skip=CKV2_AWS_57:kvcm only reads this password to create the first admin; later changes go through the admin plane (addAccount / deleteAccount, docs/security.md), which a rotation Lambda changing the secret would not do.
  name                    = "${var.name}/bootstrap-admin-password"
  description             = "Password of the kvcm bootstrap admin '${var.bootstrap_admin_user}' (${var.name})"
  kms_key_id              = aws_kms_key.this.arn
  recovery_window_in_days = 7
  tags                    = var.tags
}

resource "aws_secretsmanager_secret_version" "admin_password" {
  secret_id     = aws_secretsmanager_secret.admin_password.id
  secret_string = random_password.admin.result
}

# ---- the admin plane's internal ALB (both runtimes) ----

resource "aws_security_group" "admin_alb" {
  name        = "${var.name}-admin-alb"
  description = "Internal ALB of the kvcm admin plane: HTTPS from operator networks only"
  vpc_id      = var.vpc_id
  tags        = merge(var.tags, { Name = "${var.name}-admin-alb" })
}

resource "aws_vpc_security_group_ingress_rule" "admin_alb_https" {
  for_each = toset(var.admin_ingress_cidrs)

  security_group_id = aws_security_group.admin_alb.id
  description       = "HTTPS from an operator network"
  ip_protocol       = "tcp"
  from_port         = 443
  to_port           = 443
  cidr_ipv4         = each.value
}

resource "aws_lb" "admin" {
  #checkov:skip=CKV_AWS_91:Access logs are optional (alb_access_logs_bucket): the bucket and its ELB delivery policy are the operator's.
  #checkov:skip=CKV2_AWS_28:No WAF on an internal ALB reachable only from admin_ingress_cidrs; kvcm authenticates every admin request and backs off password guessing.
  name                       = "${var.name}-admin"
  internal                   = true
  load_balancer_type         = "application"
  subnets                    = var.subnet_ids
  security_groups            = [aws_security_group.admin_alb.id]
  idle_timeout               = var.alb_idle_timeout
  drop_invalid_header_fields = true
  enable_deletion_protection = var.deletion_protection

  dynamic "access_logs" {
    for_each = var.alb_access_logs_bucket == null ? [] : [var.alb_access_logs_bucket]
    content {
      bucket  = access_logs.value
      prefix  = "${var.name}/admin"
      enabled = true
    }
  }

  tags = var.tags
}

resource "aws_lb_listener" "admin" {
  load_balancer_arn = aws_lb.admin.arn
  port              = 443
  protocol          = "HTTPS"
  ssl_policy        = var.ssl_policy
  certificate_arn   = var.certificate_arn

  default_action {
    type             = "forward"
    target_group_arn = var.runtime == "ecs" ? aws_lb_target_group.admin_ecs[0].arn : aws_lb_target_group.admin_lambda[0].arn
  }

  tags = var.tags
}
