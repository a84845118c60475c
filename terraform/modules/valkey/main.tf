# ElastiCache for Valkey in cluster mode: num_node_groups shards of one primary and
# replicas_per_node_group replicas, spread over availability zones with automatic failover, TLS
# required in transit, encrypted at rest with this module's KMS key, and an AUTH token generated
# here into Secrets Manager (never a literal). Only members of the clients security group (the
# kvcm tasks and functions) can connect.

data "aws_caller_identity" "current" {}
data "aws_partition" "current" {}

locals {
  family = "valkey${split(".", var.engine_version)[0]}"
  # Node ids of a cluster-mode replication group: <id>-<shard 0001..>-<node 001..>.
  node_ids = flatten([
    for g in range(1, var.num_node_groups + 1) : [
      for n in range(1, var.replicas_per_node_group + 2) : format("%s-%04d-%03d", var.name, g, n)
    ]
  ])
}

# ---- encryption key of the data at rest and of the AUTH token secret ----

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
      identifiers = ["arn:${data.aws_partition.current.partition}:iam::${data.aws_caller_identity.current.account_id}:root"]
    }
  }

  # Use of the key is delegated to IAM policies of the account (ElastiCache through grants,
  # the kvcm roles' kms:Decrypt for the secret).
  statement {
    sid = "AccountUsesKeyThroughIam"
    actions = [
      "kms:CreateGrant", "kms:Decrypt", "kms:DescribeKey", "kms:Encrypt", "kms:GenerateDataKey",
      "kms:GenerateDataKeyWithoutPlaintext", "kms:ReEncryptFrom", "kms:ReEncryptTo",
    ]
    resources = ["*"]
    principals {
      type        = "AWS"
      identifiers = ["arn:${data.aws_partition.current.partition}:iam::${data.aws_caller_identity.current.account_id}:root"]
    }
  }
}

resource "aws_kms_key" "this" {
  description             = "${var.name}: Valkey data at rest and its AUTH token secret"
  enable_key_rotation     = true
  deletion_window_in_days = 30
  policy                  = data.aws_iam_policy_document.key_policy.json
  tags                    = var.tags
}

resource "aws_kms_alias" "this" {
  name          = "alias/${var.name}-valkey"
  target_key_id = aws_kms_key.this.key_id
}

# ---- AUTH token: generated, stored in Secrets Manager ----

resource "random_password" "auth_token" {
  # 64 letters and digits (~380 bits): valid for ElastiCache (16-128 printable, no / " @) and
  # safe in a URL should one ever carry it.
  length  = 64
  special = false
  keepers = {
    version = var.auth_token_version
  }
}

resource "aws_secretsmanager_secret" "auth_token" {
  #checkov:skip=CKV2_AWS_57:The AUTH token is rotated with auth_token_version (ROTATE then SET on the replication group, see README); a rotation Lambda could not update ElastiCache and the kvcm tasks in step.
  name                    = "${var.name}/valkey-auth-token"
  description             = "AUTH token of the ${var.name} Valkey cluster (KVCM_VALKEY_PASSWORD of kvcm-api and kvcm-worker)"
  kms_key_id              = aws_kms_key.this.arn
  recovery_window_in_days = 7
  tags                    = var.tags
}

resource "aws_secretsmanager_secret_version" "auth_token" {
  secret_id     = aws_secretsmanager_secret.auth_token.id
  secret_string = random_password.auth_token.result
}

# ---- network ----

resource "aws_elasticache_subnet_group" "this" {
  name        = "${var.name}-valkey"
  description = "Private subnets of the ${var.name} Valkey cluster"
  subnet_ids  = var.subnet_ids
  tags        = var.tags
}

# Members of this group (the kvcm tasks and functions) may reach Valkey.
resource "aws_security_group" "clients" {
  #checkov:skip=CKV2_AWS_5:Attached outside this module: the api and worker modules put their tasks and functions in it (client_security_group_id).
  name        = "${var.name}-valkey-clients"
  description = "Clients of the ${var.name} Valkey cluster (kvcm-api, kvcm-worker)"
  vpc_id      = var.vpc_id
  tags        = merge(var.tags, { Name = "${var.name}-valkey-clients" })
}

resource "aws_vpc_security_group_egress_rule" "clients_to_valkey" {
  security_group_id            = aws_security_group.clients.id
  description                  = "Valkey (TLS) to the cluster nodes"
  ip_protocol                  = "tcp"
  from_port                    = var.port
  to_port                      = var.port
  referenced_security_group_id = aws_security_group.valkey.id
}

resource "aws_security_group" "valkey" {
  name        = "${var.name}-valkey"
  description = "The ${var.name} Valkey cluster nodes: Valkey from kvcm clients only"
  vpc_id      = var.vpc_id
  tags        = merge(var.tags, { Name = "${var.name}-valkey" })
}

resource "aws_vpc_security_group_ingress_rule" "valkey_from_clients" {
  # Keys known at plan time (the group ids are not until apply): "clients", "extra-0", ...
  for_each = merge(
    { clients = aws_security_group.clients.id },
    { for i, id in var.client_security_group_ids : "extra-${i}" => id },
  )

  security_group_id            = aws_security_group.valkey.id
  description                  = "Valkey (TLS) from kvcm clients"
  ip_protocol                  = "tcp"
  from_port                    = var.port
  to_port                      = var.port
  referenced_security_group_id = each.value
}

# ---- the cluster ----

resource "aws_elasticache_parameter_group" "this" {
  name        = "${var.name}-${local.family}-cluster"
  family      = local.family
  description = "kvcm: cluster mode, never evict kvcm metadata"

  parameter {
    name  = "cluster-enabled"
    value = "yes"
  }

  # kvcm evicts by its own policies (kvcm-worker); Valkey must refuse writes when full rather
  # than silently drop metadata keys.
  parameter {
    name  = "maxmemory-policy"
    value = "noeviction"
  }

  tags = var.tags

  lifecycle {
    create_before_destroy = true
  }
}

resource "aws_elasticache_replication_group" "this" {
  replication_group_id = var.name
  description          = "kvcm metadata (${var.name})"

  engine               = "valkey"
  engine_version       = var.engine_version
  node_type            = var.node_type
  port                 = var.port
  parameter_group_name = aws_elasticache_parameter_group.this.name

  cluster_mode               = "enabled"
  num_node_groups            = var.num_node_groups
  replicas_per_node_group    = var.replicas_per_node_group
  automatic_failover_enabled = true
  multi_az_enabled           = true

  subnet_group_name  = aws_elasticache_subnet_group.this.name
  security_group_ids = [aws_security_group.valkey.id]

  transit_encryption_enabled = true
  transit_encryption_mode    = "required"
  at_rest_encryption_enabled = true
  kms_key_id                 = aws_kms_key.this.arn
  auth_token                 = random_password.auth_token.result
  auth_token_update_strategy = var.auth_token_update_strategy

  snapshot_retention_limit   = var.snapshot_retention_days
  snapshot_window            = var.snapshot_window
  maintenance_window         = var.maintenance_window
  auto_minor_version_upgrade = true
  apply_immediately          = var.apply_immediately
  final_snapshot_identifier  = "${var.name}-final"

  log_delivery_configuration {
    destination      = var.slow_log_group_name
    destination_type = "cloudwatch-logs"
    log_format       = "json"
    log_type         = "slow-log"
  }

  log_delivery_configuration {
    destination      = var.engine_log_group_name
    destination_type = "cloudwatch-logs"
    log_format       = "json"
    log_type         = "engine-log"
  }

  tags = var.tags
}
