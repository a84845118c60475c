variable "name" {
  type        = string
  description = "Name prefix; also the replication group id (3-20 characters: load balancer and target group names such as <name>-admin-fn are limited to 32)."

  validation {
    condition     = can(regex("^[a-z][a-z0-9-]{1,18}[a-z0-9]$", var.name)) && !strcontains(var.name, "--")
    error_message = "name must be 3-20 characters of lower-case letters, digits and single hyphens, starting with a letter."
  }
}

variable "vpc_id" {
  type        = string
  description = "VPC of the replication group and its security groups."

  validation {
    condition     = can(regex("^vpc-[0-9a-f]+$", var.vpc_id))
    error_message = "vpc_id must look like vpc-0123abcd."
  }
}

variable "subnet_ids" {
  type        = list(string)
  description = "Private subnets of the cache subnet group, in at least two availability zones (Multi-AZ)."

  validation {
    condition     = length(var.subnet_ids) >= 2
    error_message = "Multi-AZ needs subnets in at least two availability zones."
  }
}

variable "engine_version" {
  type        = string
  description = "Valkey engine version (major.minor). The parameter group family follows it (valkey7, valkey8)."
  default     = "8.1"

  validation {
    condition     = contains(["7.2", "8.0", "8.1"], var.engine_version)
    error_message = "engine_version must be one of 7.2, 8.0, 8.1."
  }
}

variable "node_type" {
  type        = string
  description = "Cache node type of every node. Size it from docs/benchmarks.md: about 61 bytes of Valkey memory per block record plus indexes; keep DatabaseMemoryUsagePercentage under the alarm threshold."
  default     = "cache.r7g.large"

  validation {
    condition     = can(regex("^cache\\.[a-z0-9]+\\.[a-z0-9]+$", var.node_type))
    error_message = "node_type must be an ElastiCache node type such as cache.r7g.large."
  }
}

variable "num_node_groups" {
  type        = number
  description = "Shards (node groups) of the cluster. kvcm spreads instances over slots by hash tag, so capacity and write throughput grow with shards."
  default     = 3

  validation {
    condition     = var.num_node_groups >= 1 && var.num_node_groups <= 500 && floor(var.num_node_groups) == var.num_node_groups
    error_message = "num_node_groups must be a whole number from 1 to 500."
  }
}

variable "replicas_per_node_group" {
  type        = number
  description = "Replicas of each shard. At least 1: automatic failover and Multi-AZ need a replica to promote."
  default     = 1

  validation {
    condition     = var.replicas_per_node_group >= 1 && var.replicas_per_node_group <= 5 && floor(var.replicas_per_node_group) == var.replicas_per_node_group
    error_message = "replicas_per_node_group must be a whole number from 1 to 5 (failover needs a replica)."
  }
}

variable "port" {
  type        = number
  description = "Port of the Valkey nodes."
  default     = 6379

  validation {
    condition     = var.port >= 1024 && var.port <= 65535
    error_message = "port must be from 1024 to 65535."
  }
}

variable "client_security_group_ids" {
  type        = list(string)
  description = "Additional security groups (besides the clients group this module creates and outputs) allowed to connect to Valkey."
  default     = []
}

variable "auth_token_version" {
  type        = number
  description = "Bump to generate a new AUTH token (rotation): apply with auth_token_update_strategy = ROTATE, restart the kvcm tasks and functions, then apply again with SET."
  default     = 1

  validation {
    condition     = var.auth_token_version >= 1 && floor(var.auth_token_version) == var.auth_token_version
    error_message = "auth_token_version must be a positive whole number."
  }
}

variable "auth_token_update_strategy" {
  type        = string
  description = "How a changed AUTH token is applied to the running cluster: ROTATE (old and new both valid) or SET (only the new one)."
  default     = "ROTATE"

  validation {
    condition     = contains(["ROTATE", "SET"], var.auth_token_update_strategy)
    error_message = "auth_token_update_strategy must be ROTATE or SET."
  }
}

variable "snapshot_retention_days" {
  type        = number
  description = "Days of automatic snapshots kept (0 turns backups off)."
  default     = 7

  validation {
    condition     = var.snapshot_retention_days >= 0 && var.snapshot_retention_days <= 35
    error_message = "snapshot_retention_days must be from 0 to 35."
  }
}

variable "snapshot_window" {
  type        = string
  description = "Daily UTC window of automatic snapshots (hh24:mi-hh24:mi)."
  default     = "03:00-04:00"

  validation {
    condition     = can(regex("^[0-2][0-9]:[0-5][0-9]-[0-2][0-9]:[0-5][0-9]$", var.snapshot_window))
    error_message = "snapshot_window must look like 03:00-04:00."
  }
}

variable "maintenance_window" {
  type        = string
  description = "Weekly UTC maintenance window (ddd:hh24:mi-ddd:hh24:mi), not overlapping the snapshot window."
  default     = "sun:05:00-sun:06:00"

  validation {
    condition     = can(regex("^(mon|tue|wed|thu|fri|sat|sun):[0-2][0-9]:[0-5][0-9]-(mon|tue|wed|thu|fri|sat|sun):[0-2][0-9]:[0-5][0-9]$", var.maintenance_window))
    error_message = "maintenance_window must look like sun:05:00-sun:06:00."
  }
}

variable "apply_immediately" {
  type        = bool
  description = "Apply modifications at once instead of in the next maintenance window."
  default     = false
}

variable "slow_log_group_name" {
  type        = string
  description = "CloudWatch log group receiving the Valkey slow log (from the observability module)."
}

variable "engine_log_group_name" {
  type        = string
  description = "CloudWatch log group receiving the Valkey engine log (from the observability module)."
}

variable "tags" {
  type        = map(string)
  description = "Tags added to every resource."
  default     = {}
}
