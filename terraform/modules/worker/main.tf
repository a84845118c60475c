# kvcm-worker as an ECS Fargate service: deletions from the Valkey Streams, session expiry,
# storage health, reclamation. Any number of workers share the work (consumer groups, leases).
#
# Autoscaling follows the deletion backlog. Each task runs an ADOT collector sidecar that scrapes
# the worker's Prometheus /metrics on loopback and publishes kvcm_worker_deletion_stream_length
# (summed over instances) and the other worker metrics to CloudWatch (namespace
# metrics_namespace, dimensions ClusterName + ServiceName). A target-tracking policy holds
# backlog / RunningTaskCount (Container Insights) at backlog_per_worker_target.

data "aws_caller_identity" "current" {}
data "aws_partition" "current" {}
data "aws_region" "current" {}

locals {
  account      = data.aws_caller_identity.current.account_id
  region       = data.aws_region.current.region
  arn_pfx      = "arn:${data.aws_partition.current.partition}"
  cluster_name = element(split("/", var.ecs_cluster_arn), length(split("/", var.ecs_cluster_arn)) - 1)
  service_name = "${var.name}-worker"
  metrics_port = 6592

  environment = merge(
    {
      KVCM_VALKEY_URL = var.valkey_url
      KVCM_NAMESPACE  = var.namespace
      KVCM_LOG_FORMAT = "json"
      KVCM_LOG_LEVEL  = var.log_level
      # The worker's only listener is its metrics port: loopback, for the sidecar of this task.
      KVCM_BIND                 = "127.0.0.1"
      KVCM_WORKER__METRICS_PORT = tostring(local.metrics_port)
    },
    # Not a kvcm setting: changing it changes the task definition (and function configuration),
    # which is what makes a secret rotation reach every running process (secrets_version).
    { SECRETS_VERSION = tostring(var.secrets_version) },
    var.extra_environment,
  )

  secrets = {
    KVCM_VALKEY_PASSWORD = var.valkey_auth_secret_arn
  }

  # Worker metrics published to CloudWatch and how the sidecar folds their labels.
  metric_aggregations = {
    kvcm_worker_deletion_stream_length = "sum"
    kvcm_worker_deletion_pending       = "sum"
    kvcm_worker_deletions_total        = "sum"
    kvcm_worker_dead_letters_total     = "sum"
    kvcm_worker_sessions_expired_total = "sum"
    kvcm_worker_evictions_total        = "sum"
    kvcm_group_usage_ratio             = "max"
    kvcm_storage_healthy               = "min"
  }
  published_metrics = concat(keys(local.metric_aggregations), ["kvcm_worker_reclaim_round_seconds"])

  adot_config = templatefile("${path.module}/adot-config.yaml.tftpl", {
    metrics_port = local.metrics_port
    cluster_name = local.cluster_name
    service_name = local.service_name
    metrics      = local.published_metrics
    aggregations = local.metric_aggregations
    namespace    = var.metrics_namespace
    log_group    = var.metrics_log_group_name
    region       = local.region
  })

  efs_arns = [for v in var.storage_volumes : "${local.arn_pfx}:elasticfilesystem:${local.region}:${local.account}:file-system/${v.file_system_id}"]
}

# ---- network ----

resource "aws_security_group" "tasks" {
  name        = "${var.name}-worker-tasks"
  description = "kvcm-worker tasks: no inbound; HTTPS to AWS APIs, NFS to EFS, Valkey through the clients group"
  vpc_id      = var.vpc_id
  tags        = merge(var.tags, { Name = "${var.name}-worker-tasks" })
}

resource "aws_vpc_security_group_egress_rule" "https" {
  security_group_id = aws_security_group.tasks.id
  description       = "HTTPS to AWS APIs (ECR, Secrets Manager, CloudWatch Logs) through the VPC endpoints or NAT"
  ip_protocol       = "tcp"
  from_port         = 443
  to_port           = 443
  cidr_ipv4         = "0.0.0.0/0"
}

resource "aws_vpc_security_group_egress_rule" "nfs" {
  count             = length(var.storage_volumes) > 0 ? 1 : 0
  security_group_id = aws_security_group.tasks.id
  description       = "NFS (TLS) to the EFS mount targets of the storages"
  ip_protocol       = "tcp"
  from_port         = 2049
  to_port           = 2049
  cidr_ipv4         = var.vpc_cidr
}

# ---- IAM ----

data "aws_iam_policy_document" "ecs_tasks_assume" {
  statement {
    actions = ["sts:AssumeRole"]
    principals {
      type        = "Service"
      identifiers = ["ecs-tasks.amazonaws.com"]
    }
    condition {
      test     = "StringEquals"
      variable = "aws:SourceAccount"
      values   = [local.account]
    }
  }
}

# Execution role: pulls the image, writes the containers' logs, reads the Valkey secret.
resource "aws_iam_role" "execution" {
  name               = "${var.name}-worker-execution"
  description        = "ECS task execution role of kvcm-worker: image pull, logs, the Valkey secret"
  assume_role_policy = data.aws_iam_policy_document.ecs_tasks_assume.json
  tags               = var.tags
}

data "aws_iam_policy_document" "execution" {
  statement {
    sid       = "EcrAuthToken"
    actions   = ["ecr:GetAuthorizationToken"] # has no resource-level permissions
    resources = ["*"]
  }
  statement {
    sid       = "PullTheKvcmImage"
    actions   = ["ecr:BatchCheckLayerAvailability", "ecr:BatchGetImage", "ecr:GetDownloadUrlForLayer"]
    resources = [var.ecr_repository_arn]
  }
  statement {
    sid       = "WriteItsLogs"
    actions   = ["logs:CreateLogStream", "logs:PutLogEvents"]
    resources = ["${var.log_group_arn}:*"]
  }
  statement {
    sid       = "ReadItsSecret"
    actions   = ["secretsmanager:GetSecretValue"]
    resources = values(local.secrets)
  }
  statement {
    sid       = "DecryptItsSecret"
    actions   = ["kms:Decrypt"]
    resources = [var.valkey_kms_key_arn]
    condition {
      test     = "StringEquals"
      variable = "kms:ViaService"
      values   = ["secretsmanager.${local.region}.amazonaws.com"]
    }
  }
}

resource "aws_iam_role_policy" "execution" {
  name   = "kvcm-worker-execution"
  role   = aws_iam_role.execution.id
  policy = data.aws_iam_policy_document.execution.json
}

# Task role: what the containers call at run time. The metrics sidecar writes EMF events to its
# log group; the worker mounts the storages' EFS file systems (IAM authorization).
resource "aws_iam_role" "task" {
  name               = "${var.name}-worker-task"
  description        = "kvcm-worker task role: EMF metrics of the sidecar, EFS mounts of the storages"
  assume_role_policy = data.aws_iam_policy_document.ecs_tasks_assume.json
  tags               = var.tags
}

data "aws_iam_policy_document" "task" {
  statement {
    sid       = "PublishMetricsAsEmf"
    actions   = ["logs:CreateLogStream", "logs:DescribeLogStreams", "logs:PutLogEvents"]
    resources = [var.metrics_log_group_arn, "${var.metrics_log_group_arn}:*"]
  }

  dynamic "statement" {
    for_each = length(local.efs_arns) > 0 ? [1] : []
    content {
      sid       = "MountTheStorages"
      actions   = ["elasticfilesystem:ClientMount", "elasticfilesystem:ClientWrite"]
      resources = local.efs_arns
    }
  }
}

resource "aws_iam_role_policy" "task" {
  name   = "kvcm-worker-task"
  role   = aws_iam_role.task.id
  policy = data.aws_iam_policy_document.task.json
}

# ---- task definition and service ----

resource "aws_ecs_task_definition" "this" {
  family                   = local.service_name
  requires_compatibilities = ["FARGATE"]
  network_mode             = "awsvpc"
  cpu                      = var.cpu
  memory                   = var.memory
  execution_role_arn       = aws_iam_role.execution.arn
  task_role_arn            = aws_iam_role.task.arn

  runtime_platform {
    operating_system_family = "LINUX"
    cpu_architecture        = var.architecture
  }

  dynamic "volume" {
    for_each = var.storage_volumes
    content {
      name = volume.value.name
      efs_volume_configuration {
        file_system_id     = volume.value.file_system_id
        transit_encryption = "ENABLED"
        authorization_config {
          access_point_id = volume.value.access_point_id
          iam             = "ENABLED"
        }
      }
    }
  }

  container_definitions = jsonencode([
    {
      name                   = "kvcm-worker"
      image                  = var.image
      essential              = true
      command                = ["kvcm-worker"]
      user                   = "10001:10001"
      readonlyRootFilesystem = true
      privileged             = false
      environment            = [for k in sort(keys(local.environment)) : { name = k, value = local.environment[k] }]
      secrets                = [for k in sort(keys(local.secrets)) : { name = k, valueFrom = local.secrets[k] }]
      mountPoints            = [for v in var.storage_volumes : { sourceVolume = v.name, containerPath = v.container_path, readOnly = false }]
      linuxParameters        = { capabilities = { drop = ["ALL"] } }
      stopTimeout            = 30
      healthCheck = {
        command     = ["CMD", "/usr/local/bin/kvcm-healthcheck"]
        interval    = 15
        timeout     = 3
        retries     = 3
        startPeriod = 15
      }
      logConfiguration = {
        logDriver = "awslogs"
        options = {
          awslogs-group         = var.log_group_name
          awslogs-region        = local.region
          awslogs-stream-prefix = "worker"
        }
      }
    },
    {
      # Essential: a worker whose metrics are not published can be neither scaled nor alarmed
      # on, so ECS replaces the task if the collector dies.
      name                   = "metrics"
      image                  = var.adot_image
      essential              = true
      readonlyRootFilesystem = true
      privileged             = false
      environment            = [{ name = "AOT_CONFIG_CONTENT", value = local.adot_config }]
      linuxParameters        = { capabilities = { drop = ["ALL"] } }
      logConfiguration = {
        logDriver = "awslogs"
        options = {
          awslogs-group         = var.log_group_name
          awslogs-region        = local.region
          awslogs-stream-prefix = "metrics"
        }
      }
    },
  ])

  tags = var.tags
}

resource "aws_ecs_service" "this" {
  name             = local.service_name
  cluster          = var.ecs_cluster_arn
  task_definition  = aws_ecs_task_definition.this.arn
  desired_count    = var.min_capacity
  launch_type      = "FARGATE"
  platform_version = "LATEST"
  propagate_tags   = "SERVICE"

  deployment_minimum_healthy_percent = 50
  deployment_maximum_percent         = 200

  deployment_circuit_breaker {
    enable   = true
    rollback = true
  }

  network_configuration {
    subnets          = var.subnet_ids
    security_groups  = [aws_security_group.tasks.id, var.valkey_client_security_group_id]
    assign_public_ip = false
  }

  lifecycle {
    ignore_changes = [desired_count] # owned by autoscaling
  }

  depends_on = [aws_iam_role_policy.execution, aws_iam_role_policy.task]

  tags = var.tags
}

# ---- autoscaling on the deletion backlog ----

resource "aws_appautoscaling_target" "this" {
  service_namespace  = "ecs"
  scalable_dimension = "ecs:service:DesiredCount"
  resource_id        = "service/${local.cluster_name}/${aws_ecs_service.this.name}"
  min_capacity       = var.min_capacity
  max_capacity       = var.max_capacity
}

resource "aws_appautoscaling_policy" "backlog" {
  name               = "${var.name}-worker-deletion-backlog"
  policy_type        = "TargetTrackingScaling"
  service_namespace  = aws_appautoscaling_target.this.service_namespace
  scalable_dimension = aws_appautoscaling_target.this.scalable_dimension
  resource_id        = aws_appautoscaling_target.this.resource_id

  target_tracking_scaling_policy_configuration {
    target_value       = var.backlog_per_worker_target
    scale_out_cooldown = 60
    scale_in_cooldown  = 300

    customized_metric_specification {
      metrics {
        id          = "backlog"
        label       = "Entries in the deletion streams (kvcm_worker_deletion_stream_length, max over workers)"
        return_data = false
        metric_stat {
          stat = "Maximum"
          metric {
            namespace   = var.metrics_namespace
            metric_name = "kvcm_worker_deletion_stream_length"
            dimensions {
              name  = "ClusterName"
              value = local.cluster_name
            }
            dimensions {
              name  = "ServiceName"
              value = local.service_name
            }
          }
        }
      }
      metrics {
        id          = "workers"
        label       = "Running worker tasks"
        return_data = false
        metric_stat {
          stat = "Average"
          metric {
            namespace   = "ECS/ContainerInsights"
            metric_name = "RunningTaskCount"
            dimensions {
              name  = "ClusterName"
              value = local.cluster_name
            }
            dimensions {
              name  = "ServiceName"
              value = local.service_name
            }
          }
        }
      }
      metrics {
        id          = "backlog_per_worker"
        label       = "Deletion backlog per running worker"
        expression  = "FILL(backlog, 0) / FILL(workers, 1)"
        return_data = true
      }
    }
  }
}
