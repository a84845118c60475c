# Logs, alarms and a dashboard of a kvcm deployment:
# * CloudWatch log groups (KMS-encrypted, with retention) for kvcm-api (ECS or Lambda),
#   kvcm-worker, the worker's metrics (EMF), API Gateway access logs, the Valkey slow and engine
#   logs and the VPC flow logs;
# * an SNS topic with the alarms:
#     meta-plane 5xx rate and p99 latency (AWS/ApplicationELB or AWS/ApiGateway), admin-plane 5xx,
#     Valkey EngineCPUUtilization, DatabaseMemoryUsagePercentage and ReplicationLag per node
#     (AWS/ElastiCache), and from kvcm-worker's own metrics (published by its ADOT sidecar):
#     dead letters (kvcm_worker_dead_letters_total), deletion backlog
#     (kvcm_worker_deletion_stream_length), reclaim lag (kvcm_group_usage_ratio,
#     kvcm_worker_reclaim_round_seconds) and unhealthy storages (kvcm_storage_healthy);
# * a dashboard of the same.

data "aws_caller_identity" "current" {}
data "aws_partition" "current" {}
data "aws_region" "current" {}

locals {
  account = data.aws_caller_identity.current.account_id
  region  = data.aws_region.current.region
  arn_pfx = "arn:${data.aws_partition.current.partition}"

  log_groups = {
    api             = "/kvcm/${var.name}/api"
    worker          = "/kvcm/${var.name}/worker"
    worker_metrics  = "/kvcm/${var.name}/worker-metrics"
    lambda_meta     = "/aws/lambda/${var.name}-meta"
    lambda_admin    = "/aws/lambda/${var.name}-admin"
    apigw_access    = "/kvcm/${var.name}/apigw-access"
    valkey_slow_log = "/kvcm/${var.name}/valkey-slow-log"
    valkey_engine   = "/kvcm/${var.name}/valkey-engine-log"
    vpc_flow_logs   = "/kvcm/${var.name}/vpc-flow-logs"
  }

  worker_dims = {
    ClusterName = var.ecs_cluster_name
    ServiceName = var.worker_service_name
  }

  alarm_actions = [aws_sns_topic.alarms.arn]
}

# ---- KMS key of the log groups and the alarm topic ----

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
      "kms:Decrypt", "kms:DescribeKey", "kms:Encrypt", "kms:GenerateDataKey", "kms:ReEncryptFrom", "kms:ReEncryptTo",
    ]
    resources = ["*"]
    principals {
      type        = "AWS"
      identifiers = ["${local.arn_pfx}:iam::${local.account}:root"]
    }
  }

  statement {
    sid       = "CloudWatchLogsEncryptsThisDeploymentsLogGroups"
    actions   = ["kms:Decrypt", "kms:DescribeKey", "kms:Encrypt", "kms:GenerateDataKey", "kms:ReEncryptFrom", "kms:ReEncryptTo"]
    resources = ["*"]
    principals {
      type        = "Service"
      identifiers = ["logs.${local.region}.amazonaws.com"]
    }
    condition {
      test     = "ArnLike"
      variable = "kms:EncryptionContext:aws:logs:arn"
      values = [
        "${local.arn_pfx}:logs:${local.region}:${local.account}:log-group:/kvcm/${var.name}/*",
        "${local.arn_pfx}:logs:${local.region}:${local.account}:log-group:/aws/lambda/${var.name}-*",
      ]
    }
  }

  statement {
    sid       = "CloudWatchAlarmsPublishToTheEncryptedTopic"
    actions   = ["kms:Decrypt", "kms:GenerateDataKey"]
    resources = ["*"]
    principals {
      type        = "Service"
      identifiers = ["cloudwatch.amazonaws.com"]
    }
    condition {
      test     = "StringEquals"
      variable = "aws:SourceAccount"
      values   = [local.account]
    }
  }
}

resource "aws_kms_key" "this" {
  description             = "${var.name}: kvcm log groups and alarm topic"
  enable_key_rotation     = true
  deletion_window_in_days = 30
  policy                  = data.aws_iam_policy_document.key_policy.json
  tags                    = var.tags
}

resource "aws_kms_alias" "this" {
  name          = "alias/${var.name}-observability"
  target_key_id = aws_kms_key.this.key_id
}

# ---- log groups ----

resource "aws_cloudwatch_log_group" "this" {
  for_each = local.log_groups

  name              = each.value
  retention_in_days = var.log_retention_days
  kms_key_id        = aws_kms_key.this.arn
  tags              = var.tags
}

# ---- alarm topic ----

resource "aws_sns_topic" "alarms" {
  name              = "${var.name}-alarms"
  kms_master_key_id = aws_kms_key.this.arn
  tags              = var.tags
}

data "aws_iam_policy_document" "alarms_topic" {
  statement {
    sid       = "CloudWatchAlarmsOfThisAccountPublish"
    actions   = ["sns:Publish"]
    resources = [aws_sns_topic.alarms.arn]
    principals {
      type        = "Service"
      identifiers = ["cloudwatch.amazonaws.com"]
    }
    condition {
      test     = "StringEquals"
      variable = "aws:SourceAccount"
      values   = [local.account]
    }
  }
}

resource "aws_sns_topic_policy" "alarms" {
  arn    = aws_sns_topic.alarms.arn
  policy = data.aws_iam_policy_document.alarms_topic.json
}

resource "aws_sns_topic_subscription" "email" {
  for_each  = toset(var.alarm_emails)
  topic_arn = aws_sns_topic.alarms.arn
  protocol  = "email"
  endpoint  = each.value
}

# ---- meta plane: 5xx rate and p99 latency ----

resource "aws_cloudwatch_metric_alarm" "meta_5xx_rate_alb" {
  count = var.api_runtime == "ecs" ? 1 : 0

  alarm_name          = "${var.name}-meta-5xx-rate"
  alarm_description   = "More than ${var.error_rate_percent_threshold}% of meta-plane requests answered HTTP 5xx (target or load balancer) over 5 minutes."
  comparison_operator = "GreaterThanThreshold"
  threshold           = var.error_rate_percent_threshold
  evaluation_periods  = 1
  treat_missing_data  = "notBreaching"
  alarm_actions       = local.alarm_actions
  ok_actions          = local.alarm_actions

  metric_query {
    id          = "rate"
    expression  = "100 * (FILL(t5xx, 0) + FILL(e5xx, 0)) / requests"
    label       = "5xx %"
    return_data = true
  }
  metric_query {
    id = "t5xx"
    metric {
      namespace   = "AWS/ApplicationELB"
      metric_name = "HTTPCode_Target_5XX_Count"
      dimensions  = { LoadBalancer = var.meta_alb_arn_suffix }
      period      = 300
      stat        = "Sum"
    }
  }
  metric_query {
    id = "e5xx"
    metric {
      namespace   = "AWS/ApplicationELB"
      metric_name = "HTTPCode_ELB_5XX_Count"
      dimensions  = { LoadBalancer = var.meta_alb_arn_suffix }
      period      = 300
      stat        = "Sum"
    }
  }
  metric_query {
    id = "requests"
    metric {
      namespace   = "AWS/ApplicationELB"
      metric_name = "RequestCount"
      dimensions  = { LoadBalancer = var.meta_alb_arn_suffix }
      period      = 300
      stat        = "Sum"
    }
  }

  tags = var.tags
}

resource "aws_cloudwatch_metric_alarm" "meta_p99_alb" {
  count = var.api_runtime == "ecs" ? 1 : 0

  alarm_name          = "${var.name}-meta-p99-latency"
  alarm_description   = "Meta-plane p99 latency (ALB TargetResponseTime) above ${var.p99_latency_ms_threshold} ms in 3 of 5 minutes."
  namespace           = "AWS/ApplicationELB"
  metric_name         = "TargetResponseTime"
  dimensions          = { LoadBalancer = var.meta_alb_arn_suffix }
  extended_statistic  = "p99"
  period              = 60
  evaluation_periods  = 5
  datapoints_to_alarm = 3
  comparison_operator = "GreaterThanThreshold"
  threshold           = var.p99_latency_ms_threshold / 1000
  treat_missing_data  = "notBreaching"
  alarm_actions       = local.alarm_actions
  ok_actions          = local.alarm_actions
  tags                = var.tags
}

resource "aws_cloudwatch_metric_alarm" "meta_5xx_rate_apigw" {
  count = var.api_runtime == "lambda" ? 1 : 0

  alarm_name          = "${var.name}-meta-5xx-rate"
  alarm_description   = "More than ${var.error_rate_percent_threshold}% of meta-plane requests answered HTTP 5xx by API Gateway over 5 minutes."
  comparison_operator = "GreaterThanThreshold"
  threshold           = var.error_rate_percent_threshold
  evaluation_periods  = 1
  treat_missing_data  = "notBreaching"
  alarm_actions       = local.alarm_actions
  ok_actions          = local.alarm_actions

  metric_query {
    id          = "rate"
    expression  = "100 * FILL(e5xx, 0) / requests"
    label       = "5xx %"
    return_data = true
  }
  metric_query {
    id = "e5xx"
    metric {
      namespace   = "AWS/ApiGateway"
      metric_name = "5xx"
      dimensions  = { ApiId = coalesce(var.api_gateway_id, "none"), Stage = "$default" }
      period      = 300
      stat        = "Sum"
    }
  }
  metric_query {
    id = "requests"
    metric {
      namespace   = "AWS/ApiGateway"
      metric_name = "Count"
      dimensions  = { ApiId = coalesce(var.api_gateway_id, "none"), Stage = "$default" }
      period      = 300
      stat        = "Sum"
    }
  }

  tags = var.tags
}

resource "aws_cloudwatch_metric_alarm" "meta_p99_apigw" {
  count = var.api_runtime == "lambda" ? 1 : 0

  alarm_name          = "${var.name}-meta-p99-latency"
  alarm_description   = "Meta-plane p99 latency (API Gateway Latency, cold starts included) above ${var.p99_latency_ms_threshold} ms in 3 of 5 minutes."
  namespace           = "AWS/ApiGateway"
  metric_name         = "Latency"
  dimensions          = { ApiId = coalesce(var.api_gateway_id, "none"), Stage = "$default" }
  extended_statistic  = "p99"
  period              = 60
  evaluation_periods  = 5
  datapoints_to_alarm = 3
  comparison_operator = "GreaterThanThreshold"
  threshold           = var.p99_latency_ms_threshold
  treat_missing_data  = "notBreaching"
  alarm_actions       = local.alarm_actions
  ok_actions          = local.alarm_actions
  tags                = var.tags
}

resource "aws_cloudwatch_metric_alarm" "lambda_throttles" {
  for_each = var.api_runtime == "lambda" ? { meta = var.meta_function_name, admin = var.admin_function_name } : {}

  alarm_name          = "${var.name}-${each.key}-lambda-throttles"
  alarm_description   = "The ${each.key}-plane function was throttled (reserved concurrency reached): raise lambda_reserved_concurrency."
  namespace           = "AWS/Lambda"
  metric_name         = "Throttles"
  dimensions          = { FunctionName = each.value }
  statistic           = "Sum"
  period              = 300
  evaluation_periods  = 1
  comparison_operator = "GreaterThanThreshold"
  threshold           = 0
  treat_missing_data  = "notBreaching"
  alarm_actions       = local.alarm_actions
  ok_actions          = local.alarm_actions
  tags                = var.tags
}

resource "aws_cloudwatch_metric_alarm" "admin_5xx" {
  alarm_name          = "${var.name}-admin-5xx"
  alarm_description   = "The admin plane answered HTTP 5xx (target or load balancer) in 2 of 3 periods of 5 minutes."
  comparison_operator = "GreaterThanThreshold"
  threshold           = 0
  evaluation_periods  = 3
  datapoints_to_alarm = 2
  treat_missing_data  = "notBreaching"
  alarm_actions       = local.alarm_actions
  ok_actions          = local.alarm_actions

  metric_query {
    id          = "errors"
    expression  = "FILL(t5xx, 0) + FILL(e5xx, 0)"
    label       = "admin 5xx"
    return_data = true
  }
  metric_query {
    id = "t5xx"
    metric {
      namespace   = "AWS/ApplicationELB"
      metric_name = "HTTPCode_Target_5XX_Count"
      dimensions  = { LoadBalancer = var.admin_alb_arn_suffix }
      period      = 300
      stat        = "Sum"
    }
  }
  metric_query {
    id = "e5xx"
    metric {
      namespace   = "AWS/ApplicationELB"
      metric_name = "HTTPCode_ELB_5XX_Count"
      dimensions  = { LoadBalancer = var.admin_alb_arn_suffix }
      period      = 300
      stat        = "Sum"
    }
  }

  tags = var.tags
}

# ---- Valkey: per node CPU, memory, replication lag ----

locals {
  valkey_metrics = {
    cpu = {
      metric    = "EngineCPUUtilization"
      stat      = "Average"
      threshold = var.valkey_cpu_percent_threshold
      missing   = "missing"
      what      = "engine CPU above ${var.valkey_cpu_percent_threshold}% for 15 minutes: add shards (num_node_groups) or a larger node type"
    }
    memory = {
      metric    = "DatabaseMemoryUsagePercentage"
      stat      = "Maximum"
      threshold = var.valkey_memory_percent_threshold
      missing   = "missing"
      what      = "memory above ${var.valkey_memory_percent_threshold}% (noeviction: writes fail at 100%): add shards, a larger node type, or lower the groups' quotas"
    }
    replication_lag = {
      metric    = "ReplicationLag"
      stat      = "Maximum"
      threshold = var.valkey_replication_lag_seconds_threshold
      missing   = "notBreaching" # primaries publish no ReplicationLag
      what      = "replica more than ${var.valkey_replication_lag_seconds_threshold} s behind its primary for 15 minutes"
    }
  }
  valkey_alarms = {
    for pair in setproduct(var.valkey_node_ids, keys(local.valkey_metrics)) :
    "${pair[0]}-${pair[1]}" => merge(local.valkey_metrics[pair[1]], { node = pair[0] })
  }
}

resource "aws_cloudwatch_metric_alarm" "valkey" {
  for_each = local.valkey_alarms

  alarm_name          = each.key
  alarm_description   = "Valkey node ${each.value.node}: ${each.value.what}."
  namespace           = "AWS/ElastiCache"
  metric_name         = each.value.metric
  dimensions          = { CacheClusterId = each.value.node }
  statistic           = each.value.stat
  period              = 300
  evaluation_periods  = 3
  comparison_operator = "GreaterThanThreshold"
  threshold           = each.value.threshold
  treat_missing_data  = each.value.missing
  alarm_actions       = local.alarm_actions
  ok_actions          = local.alarm_actions
  tags                = var.tags
}

# ---- kvcm-worker (metrics published by its ADOT sidecar, dimensions ClusterName, ServiceName) ----

resource "aws_cloudwatch_metric_alarm" "dead_letters" {
  alarm_name          = "${var.name}-worker-dead-letters"
  alarm_description   = "kvcm-worker moved deletions to a dead-letter stream (kvcm_worker_dead_letters_total): a storage refused deletes for max_delete_attempts tries; see the worker logs and the instances' del_dead streams."
  namespace           = var.metrics_namespace
  metric_name         = "kvcm_worker_dead_letters_total"
  dimensions          = local.worker_dims
  statistic           = "Sum"
  period              = 300
  evaluation_periods  = 1
  comparison_operator = "GreaterThanThreshold"
  threshold           = 0
  treat_missing_data  = "notBreaching"
  alarm_actions       = local.alarm_actions
  ok_actions          = local.alarm_actions
  tags                = var.tags
}

resource "aws_cloudwatch_metric_alarm" "deletion_backlog" {
  alarm_name          = "${var.name}-worker-deletion-backlog"
  alarm_description   = "More than ${var.deletion_backlog_threshold} entries wait in the deletion streams (kvcm_worker_deletion_stream_length) for 15 minutes, with the workers scaled out: storages are slow or max_capacity is too low."
  namespace           = var.metrics_namespace
  metric_name         = "kvcm_worker_deletion_stream_length"
  dimensions          = local.worker_dims
  statistic           = "Maximum"
  period              = 300
  evaluation_periods  = 3
  comparison_operator = "GreaterThanThreshold"
  threshold           = var.deletion_backlog_threshold
  treat_missing_data  = "missing"
  alarm_actions       = local.alarm_actions
  ok_actions          = local.alarm_actions
  tags                = var.tags
}

resource "aws_cloudwatch_metric_alarm" "reclaim_usage" {
  alarm_name          = "${var.name}-worker-reclaim-lag"
  alarm_description   = "Reclaim lag: some instance group stays above ${var.reclaim_usage_ratio_threshold} of its quota (kvcm_group_usage_ratio) for 15 minutes; reclamation does not keep up with writes."
  namespace           = var.metrics_namespace
  metric_name         = "kvcm_group_usage_ratio"
  dimensions          = local.worker_dims
  statistic           = "Maximum"
  period              = 300
  evaluation_periods  = 3
  comparison_operator = "GreaterThanThreshold"
  threshold           = var.reclaim_usage_ratio_threshold
  treat_missing_data  = "missing"
  alarm_actions       = local.alarm_actions
  ok_actions          = local.alarm_actions
  tags                = var.tags
}

resource "aws_cloudwatch_metric_alarm" "reclaim_round" {
  alarm_name          = "${var.name}-worker-reclaim-round-slow"
  alarm_description   = "Reclaim lag: a reclaim round (kvcm_worker_reclaim_round_seconds) took longer than ${var.reclaim_round_seconds_threshold} s in 2 of 3 periods of 5 minutes."
  namespace           = var.metrics_namespace
  metric_name         = "kvcm_worker_reclaim_round_seconds"
  dimensions          = local.worker_dims
  statistic           = "Maximum"
  period              = 300
  evaluation_periods  = 3
  datapoints_to_alarm = 2
  comparison_operator = "GreaterThanThreshold"
  threshold           = var.reclaim_round_seconds_threshold
  treat_missing_data  = "notBreaching"
  alarm_actions       = local.alarm_actions
  ok_actions          = local.alarm_actions
  tags                = var.tags
}

resource "aws_cloudwatch_metric_alarm" "storage_unhealthy" {
  alarm_name          = "${var.name}-storage-unhealthy"
  alarm_description   = "A storage failed the worker's health probe for 10 minutes (kvcm_storage_healthy = 0): it gets no writes and reads avoid it; is its filesystem mounted?"
  namespace           = var.metrics_namespace
  metric_name         = "kvcm_storage_healthy"
  dimensions          = local.worker_dims
  statistic           = "Minimum"
  period              = 300
  evaluation_periods  = 2
  comparison_operator = "LessThanThreshold"
  threshold           = 1
  treat_missing_data  = "missing"
  alarm_actions       = local.alarm_actions
  ok_actions          = local.alarm_actions
  tags                = var.tags
}

# ---- dashboard ----

locals {
  # The two runtimes' widgets differ in shape: choose between their JSON texts.
  meta_requests_widget = jsondecode(var.api_runtime == "ecs" ? jsonencode({
    title = "Meta plane (ALB): requests, 5xx"
    metrics = [
      ["AWS/ApplicationELB", "RequestCount", "LoadBalancer", coalesce(var.meta_alb_arn_suffix, "none"), { stat = "Sum" }],
      [".", "HTTPCode_Target_5XX_Count", ".", ".", { stat = "Sum" }],
      [".", "HTTPCode_ELB_5XX_Count", ".", ".", { stat = "Sum" }],
    ]
    }) : jsonencode({
    title = "Meta plane (API Gateway): requests, 5xx"
    metrics = [
      ["AWS/ApiGateway", "Count", "ApiId", coalesce(var.api_gateway_id, "none"), "Stage", "$default", { stat = "Sum" }],
      [".", "5xx", ".", ".", ".", ".", { stat = "Sum" }],
    ]
  }))
  meta_latency_widget = jsondecode(var.api_runtime == "ecs" ? jsonencode({
    title = "Meta plane latency (s): p50, p99"
    metrics = [
      ["AWS/ApplicationELB", "TargetResponseTime", "LoadBalancer", coalesce(var.meta_alb_arn_suffix, "none"), { stat = "p50" }],
      ["...", { stat = "p99" }],
    ]
    }) : jsonencode({
    title = "Meta plane latency (ms): p50, p99"
    metrics = [
      ["AWS/ApiGateway", "Latency", "ApiId", coalesce(var.api_gateway_id, "none"), "Stage", "$default", { stat = "p50" }],
      ["...", { stat = "p99" }],
    ]
  }))
  worker_metric = [for m in ["kvcm_worker_deletion_stream_length", "kvcm_worker_deletion_pending"] :
    [var.metrics_namespace, m, "ClusterName", var.ecs_cluster_name, "ServiceName", var.worker_service_name, { stat = "Maximum" }]
  ]

  dashboard_widgets = [
    { type = "metric", x = 0, y = 0, width = 12, height = 6, properties = { title = local.meta_requests_widget.title, metrics = local.meta_requests_widget.metrics, region = local.region, period = 60, view = "timeSeries" } },
    { type = "metric", x = 12, y = 0, width = 12, height = 6, properties = { title = local.meta_latency_widget.title, metrics = local.meta_latency_widget.metrics, region = local.region, period = 60, view = "timeSeries" } },
    { type = "metric", x = 0, y = 6, width = 8, height = 6, properties = { title = "Valkey EngineCPUUtilization (%)", region = local.region, period = 60, view = "timeSeries", metrics = [for n in var.valkey_node_ids : ["AWS/ElastiCache", "EngineCPUUtilization", "CacheClusterId", n]] } },
    { type = "metric", x = 8, y = 6, width = 8, height = 6, properties = { title = "Valkey DatabaseMemoryUsagePercentage", region = local.region, period = 60, view = "timeSeries", metrics = [for n in var.valkey_node_ids : ["AWS/ElastiCache", "DatabaseMemoryUsagePercentage", "CacheClusterId", n]] } },
    { type = "metric", x = 16, y = 6, width = 8, height = 6, properties = { title = "Valkey ReplicationLag (s)", region = local.region, period = 60, view = "timeSeries", metrics = [for n in var.valkey_node_ids : ["AWS/ElastiCache", "ReplicationLag", "CacheClusterId", n]] } },
    { type = "metric", x = 0, y = 12, width = 8, height = 6, properties = { title = "Deletion backlog (entries)", region = local.region, period = 60, view = "timeSeries", metrics = local.worker_metric } },
    { type = "metric", x = 8, y = 12, width = 8, height = 6, properties = { title = "Dead letters, evictions", region = local.region, period = 300, view = "timeSeries", metrics = [
      [var.metrics_namespace, "kvcm_worker_dead_letters_total", "ClusterName", var.ecs_cluster_name, "ServiceName", var.worker_service_name, { stat = "Sum" }],
      [var.metrics_namespace, "kvcm_worker_evictions_total", "ClusterName", var.ecs_cluster_name, "ServiceName", var.worker_service_name, { stat = "Sum" }],
    ] } },
    { type = "metric", x = 16, y = 12, width = 8, height = 6, properties = { title = "Group usage / quota (max), reclaim round (s, max)", region = local.region, period = 60, view = "timeSeries", metrics = [
      [var.metrics_namespace, "kvcm_group_usage_ratio", "ClusterName", var.ecs_cluster_name, "ServiceName", var.worker_service_name, { stat = "Maximum" }],
      [var.metrics_namespace, "kvcm_worker_reclaim_round_seconds", "ClusterName", var.ecs_cluster_name, "ServiceName", var.worker_service_name, { stat = "Maximum", yAxis = "right" }],
    ] } },
    { type = "metric", x = 0, y = 18, width = 12, height = 6, properties = { title = "ECS running tasks", region = local.region, period = 60, view = "timeSeries", metrics = concat(
      [["ECS/ContainerInsights", "RunningTaskCount", "ClusterName", var.ecs_cluster_name, "ServiceName", var.worker_service_name]],
      var.api_service_name == null ? [] : [["ECS/ContainerInsights", "RunningTaskCount", "ClusterName", var.ecs_cluster_name, "ServiceName", var.api_service_name]],
    ) } },
    { type = "metric", x = 12, y = 18, width = 12, height = 6, properties = { title = "ECS CPU utilization (%)", region = local.region, period = 60, view = "timeSeries", metrics = concat(
      [["AWS/ECS", "CPUUtilization", "ClusterName", var.ecs_cluster_name, "ServiceName", var.worker_service_name]],
      var.api_service_name == null ? [] : [["AWS/ECS", "CPUUtilization", "ClusterName", var.ecs_cluster_name, "ServiceName", var.api_service_name]],
    ) } },
  ]
}

resource "aws_cloudwatch_dashboard" "this" {
  dashboard_name = var.name
  dashboard_body = jsonencode({ widgets = local.dashboard_widgets })
}
