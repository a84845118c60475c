variable "name" {
  type        = string
  description = "Name prefix of every resource (the same as the other modules')."

  validation {
    condition     = can(regex("^[a-z][a-z0-9-]{1,18}[a-z0-9]$", var.name))
    error_message = "name must be 3-20 characters of lower-case letters, digits and hyphens, starting with a letter."
  }
}

variable "log_retention_days" {
  type        = number
  description = "Days CloudWatch keeps the logs of kvcm, Valkey, API Gateway and the VPC flow logs."
  default     = 365

  validation {
    condition     = contains([1, 3, 5, 7, 14, 30, 60, 90, 120, 150, 180, 365, 400, 545, 731, 1096, 1827, 2192, 2557, 2922, 3288, 3653], var.log_retention_days)
    error_message = "log_retention_days must be a retention CloudWatch Logs accepts (1, 3, 5, 7, 14, 30, 60, 90, 120, 150, 180, 365, 400, 545, 731, 1096, 1827, 2192, 2557, 2922, 3288 or 3653)."
  }
}

variable "alarm_emails" {
  type        = list(string)
  description = "E-mail addresses subscribed to the alarm topic (each confirms by mail). Other subscribers can use the alarm_topic_arn output."
  default     = []

  validation {
    condition     = alltrue([for e in var.alarm_emails : can(regex("^[^@\\s]+@[^@\\s]+\\.[^@\\s]+$", e))])
    error_message = "alarm_emails must be e-mail addresses."
  }
}

variable "metrics_namespace" {
  type        = string
  description = "CloudWatch namespace the worker's metrics are published under (by its ADOT sidecar)."
  default     = "kvcm"

  validation {
    condition     = can(regex("^[A-Za-z0-9._/#:-]{1,255}$", var.metrics_namespace)) && !startswith(var.metrics_namespace, "AWS/")
    error_message = "metrics_namespace must be a custom CloudWatch namespace (not AWS/...)."
  }
}

# ---- what the alarms watch (outputs of the other modules) ----

variable "api_runtime" {
  type        = string
  description = "Where the meta plane runs: \"ecs\" (internal ALB) or \"lambda\" (API Gateway HTTP API); picks the request metrics."

  validation {
    condition     = contains(["ecs", "lambda"], var.api_runtime)
    error_message = "api_runtime must be \"ecs\" or \"lambda\"."
  }
}

variable "meta_alb_arn_suffix" {
  type        = string
  description = "ARN suffix of the meta-plane ALB (api_runtime = ecs)."
  default     = null
}

variable "admin_alb_arn_suffix" {
  type        = string
  description = "ARN suffix of the internal admin-plane ALB."
}

variable "api_gateway_id" {
  type        = string
  description = "Id of the meta-plane HTTP API (api_runtime = lambda)."
  default     = null
}

variable "meta_function_name" {
  type        = string
  description = "Name of the meta-plane Lambda function (api_runtime = lambda)."
  default     = null
}

variable "admin_function_name" {
  type        = string
  description = "Name of the admin-plane Lambda function (api_runtime = lambda)."
  default     = null
}

variable "ecs_cluster_name" {
  type        = string
  description = "ECS cluster of the kvcm services."
}

variable "api_service_name" {
  type        = string
  description = "ECS service of kvcm-api (api_runtime = ecs)."
  default     = null
}

variable "worker_service_name" {
  type        = string
  description = "ECS service of kvcm-worker."
}

variable "valkey_node_ids" {
  type        = list(string)
  description = "Cache cluster ids of the Valkey nodes (valkey module output node_ids)."

  validation {
    condition     = length(var.valkey_node_ids) >= 2
    error_message = "valkey_node_ids must list the nodes of the replication group (at least a primary and a replica)."
  }
}

# ---- thresholds ----

variable "error_rate_percent_threshold" {
  type        = number
  description = "Alarm when more than this percentage of meta-plane requests get HTTP 5xx over 5 minutes."
  default     = 1

  validation {
    condition     = var.error_rate_percent_threshold > 0 && var.error_rate_percent_threshold <= 100
    error_message = "error_rate_percent_threshold must be in (0, 100]."
  }
}

variable "p99_latency_ms_threshold" {
  type        = number
  description = "Alarm when the meta plane's p99 latency (at the load balancer / API Gateway) exceeds this many milliseconds for 3 of 5 minutes."
  default     = 100

  validation {
    condition     = var.p99_latency_ms_threshold > 0
    error_message = "p99_latency_ms_threshold must be positive."
  }
}

variable "valkey_cpu_percent_threshold" {
  type        = number
  description = "Alarm when a Valkey node's EngineCPUUtilization (the one engine thread) stays above this percentage."
  default     = 75

  validation {
    condition     = var.valkey_cpu_percent_threshold > 0 && var.valkey_cpu_percent_threshold <= 100
    error_message = "valkey_cpu_percent_threshold must be in (0, 100]."
  }
}

variable "valkey_memory_percent_threshold" {
  type        = number
  description = "Alarm when a Valkey node's DatabaseMemoryUsagePercentage exceeds this (with noeviction, writes fail at 100)."
  default     = 80

  validation {
    condition     = var.valkey_memory_percent_threshold > 0 && var.valkey_memory_percent_threshold <= 100
    error_message = "valkey_memory_percent_threshold must be in (0, 100]."
  }
}

variable "valkey_replication_lag_seconds_threshold" {
  type        = number
  description = "Alarm when a replica's ReplicationLag exceeds this many seconds (writes since then are lost on a failover)."
  default     = 5

  validation {
    condition     = var.valkey_replication_lag_seconds_threshold > 0
    error_message = "valkey_replication_lag_seconds_threshold must be positive."
  }
}

variable "deletion_backlog_threshold" {
  type        = number
  description = "Alarm when the deletion streams hold more entries than this for 15 minutes (kvcm_worker_deletion_stream_length, summed over instances)."
  default     = 1000000

  validation {
    condition     = var.deletion_backlog_threshold > 0
    error_message = "deletion_backlog_threshold must be positive."
  }
}

variable "reclaim_usage_ratio_threshold" {
  type        = number
  description = "Reclaim lag: alarm when some group's usage / quota (kvcm_group_usage_ratio, max over groups) stays above this for 15 minutes, i.e. reclamation is not keeping up with writes."
  default     = 0.98

  validation {
    condition     = var.reclaim_usage_ratio_threshold > 0 && var.reclaim_usage_ratio_threshold <= 2
    error_message = "reclaim_usage_ratio_threshold must be in (0, 2]."
  }
}

variable "reclaim_round_seconds_threshold" {
  type        = number
  description = "Reclaim lag: alarm when one reclaim round (kvcm_worker_reclaim_round_seconds, max) takes longer than this."
  default     = 60

  validation {
    condition     = var.reclaim_round_seconds_threshold > 0
    error_message = "reclaim_round_seconds_threshold must be positive."
  }
}

variable "tags" {
  type        = map(string)
  description = "Tags added to every resource."
  default     = {}
}
