# A complete production kvcm stack: VPC, ElastiCache for Valkey (cluster mode, TLS, Multi-AZ),
# kvcm-api (ECS or Lambda) with its admin plane on an internal ALB, kvcm-worker with backlog
# autoscaling, logs, alarms and a dashboard. See ../../README.md.

locals {
  image = "${aws_ecr_repository.kvcm.repository_url}:${var.image_tag}"
}

data "aws_caller_identity" "current" {}

# ---- the image repository (push infra/Dockerfile's image here before the full apply) ----

resource "aws_kms_key" "ecr" {
  description             = "${var.name}: kvcm image repository"
  enable_key_rotation     = true
  deletion_window_in_days = 30
  policy                  = data.aws_iam_policy_document.ecr_key_policy.json
}

data "aws_iam_policy_document" "ecr_key_policy" {
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
      identifiers = ["arn:aws:iam::${data.aws_caller_identity.current.account_id}:root"]
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
      identifiers = ["arn:aws:iam::${data.aws_caller_identity.current.account_id}:root"]
    }
  }
}

resource "aws_ecr_repository" "kvcm" {
  name                 = var.name
  image_tag_mutability = "IMMUTABLE"

  image_scanning_configuration {
    scan_on_push = true
  }

  encryption_configuration {
    encryption_type = "KMS"
    kms_key         = aws_kms_key.ecr.arn
  }
}

resource "aws_ecr_lifecycle_policy" "kvcm" {
  repository = aws_ecr_repository.kvcm.name
  policy = jsonencode({
    rules = [{
      rulePriority = 1
      description  = "Keep the 50 newest images"
      selection    = { tagStatus = "any", countType = "imageCountMoreThan", countNumber = 50 }
      action       = { type = "expire" }
    }]
  })
}

# Lambda pulls container images with the repository policy (not the function's role): allow
# this deployment's functions only.
data "aws_iam_policy_document" "ecr_lambda_pull" {
  statement {
    sid     = "ThisDeploymentsFunctionsPull"
    actions = ["ecr:BatchGetImage", "ecr:GetDownloadUrlForLayer"]
    principals {
      type        = "Service"
      identifiers = ["lambda.amazonaws.com"]
    }
    condition {
      test     = "StringLike"
      variable = "aws:sourceArn"
      values   = ["arn:aws:lambda:${var.region}:${data.aws_caller_identity.current.account_id}:function:${var.name}-*"]
    }
  }
}

resource "aws_ecr_repository_policy" "kvcm" {
  count      = var.api_runtime == "lambda" ? 1 : 0
  repository = aws_ecr_repository.kvcm.name
  policy     = data.aws_iam_policy_document.ecr_lambda_pull.json
}

# ---- ECS cluster (Container Insights: the worker autoscaling reads RunningTaskCount) ----

resource "aws_ecs_cluster" "this" {
  name = var.name

  setting {
    name  = "containerInsights"
    value = "enabled"
  }
}

# ---- the modules ----

module "observability" {
  source = "../../modules/observability"

  name         = var.name
  alarm_emails = var.alarm_emails
  api_runtime  = var.api_runtime

  meta_alb_arn_suffix  = module.api.meta_alb_arn_suffix
  admin_alb_arn_suffix = module.api.admin_alb_arn_suffix
  api_gateway_id       = module.api.api_gateway_id
  meta_function_name   = module.api.meta_function_name
  admin_function_name  = module.api.admin_function_name
  ecs_cluster_name     = aws_ecs_cluster.this.name
  api_service_name     = module.api.service_name
  worker_service_name  = module.worker.service_name
  valkey_node_ids      = module.valkey.node_ids
}

module "network" {
  source = "../../modules/network"

  name               = var.name
  vpc_cidr           = var.vpc_cidr
  az_count           = 3
  flow_log_group_arn = module.observability.log_group_arns["vpc_flow_logs"]
}

module "valkey" {
  source = "../../modules/valkey"

  name                    = var.name
  vpc_id                  = module.network.vpc_id
  subnet_ids              = module.network.private_subnet_ids
  node_type               = var.valkey_node_type
  num_node_groups         = var.valkey_shards
  replicas_per_node_group = var.valkey_replicas_per_shard

  auth_token_version         = var.valkey_auth_token_version
  auth_token_update_strategy = var.valkey_auth_token_update_strategy
  slow_log_group_name        = module.observability.log_group_names["valkey_slow_log"]
  engine_log_group_name      = module.observability.log_group_names["valkey_engine"]
}

module "api" {
  source = "../../modules/api"

  name               = var.name
  runtime            = var.api_runtime
  vpc_id             = module.network.vpc_id
  subnet_ids         = module.network.private_subnet_ids
  image              = local.image
  ecr_repository_arn = aws_ecr_repository.kvcm.arn
  architecture       = var.architecture
  ecs_cluster_arn    = aws_ecs_cluster.this.arn

  certificate_arn     = var.certificate_arn
  meta_ingress_cidrs  = var.meta_ingress_cidrs
  admin_ingress_cidrs = var.admin_ingress_cidrs
  min_capacity        = var.api_min_tasks
  desired_count       = var.api_min_tasks
  max_capacity        = var.api_max_tasks
  cpu                 = var.api_task_cpu
  memory              = var.api_task_memory
  startup_config      = var.startup_config

  lambda_reserved_concurrency = var.lambda_reserved_concurrency
  api_throttling_rate_limit   = var.api_throttling_rate_limit
  api_throttling_burst_limit  = var.api_throttling_burst_limit
  secrets_version             = module.valkey.auth_token_version

  valkey_url                      = module.valkey.valkey_url
  valkey_client_security_group_id = module.valkey.client_security_group_id
  valkey_auth_secret_arn          = module.valkey.auth_token_secret_arn
  valkey_kms_key_arn              = module.valkey.kms_key_arn

  ecs_log_group_name = module.observability.log_group_names["api"]
  ecs_log_group_arn  = module.observability.log_group_arns["api"]
  lambda_log_group_names = {
    meta  = module.observability.log_group_names["lambda_meta"]
    admin = module.observability.log_group_names["lambda_admin"]
  }
  lambda_log_group_arns = {
    meta  = module.observability.log_group_arns["lambda_meta"]
    admin = module.observability.log_group_arns["lambda_admin"]
  }
  apigw_access_log_group_arn = module.observability.log_group_arns["apigw_access"]
}

module "worker" {
  source = "../../modules/worker"

  name               = var.name
  vpc_id             = module.network.vpc_id
  vpc_cidr           = module.network.vpc_cidr
  subnet_ids         = module.network.private_subnet_ids
  ecs_cluster_arn    = aws_ecs_cluster.this.arn
  image              = local.image
  ecr_repository_arn = aws_ecr_repository.kvcm.arn
  architecture       = var.architecture
  min_capacity       = var.worker_min_tasks
  max_capacity       = var.worker_max_tasks

  valkey_url                      = module.valkey.valkey_url
  valkey_client_security_group_id = module.valkey.client_security_group_id
  valkey_auth_secret_arn          = module.valkey.auth_token_secret_arn
  secrets_version                 = module.valkey.auth_token_version
  valkey_kms_key_arn              = module.valkey.kms_key_arn

  log_group_name         = module.observability.log_group_names["worker"]
  log_group_arn          = module.observability.log_group_arns["worker"]
  metrics_log_group_name = module.observability.log_group_names["worker_metrics"]
  metrics_log_group_arn  = module.observability.log_group_arns["worker_metrics"]
}
