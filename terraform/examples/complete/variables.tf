variable "region" {
  type        = string
  description = "AWS region of the deployment."

  validation {
    condition     = can(regex("^[a-z]{2}(-gov)?-[a-z]+-[0-9]$", var.region))
    error_message = "region must be an AWS region such as eu-west-1."
  }
}

variable "name" {
  type        = string
  description = "Name of the deployment, prefix of every resource (3-20 of a-z, 0-9, -)."
  default     = "kvcm-prod"

  validation {
    condition     = can(regex("^[a-z][a-z0-9-]{1,18}[a-z0-9]$", var.name)) && !strcontains(var.name, "--")
    error_message = "name must be 3-20 characters of lower-case letters, digits and single hyphens, starting with a letter."
  }
}

variable "api_runtime" {
  type        = string
  description = "Where the meta plane runs: \"ecs\" (Fargate behind an internal ALB) or \"lambda\" (Lambda behind an API Gateway HTTP API). The admin plane is always on an internal ALB."
  default     = "ecs"

  validation {
    condition     = contains(["ecs", "lambda"], var.api_runtime)
    error_message = "api_runtime must be \"ecs\" or \"lambda\"."
  }
}

variable "image_tag" {
  type        = string
  description = "Tag (immutable) of the kvcm image pushed to the repository this example creates, e.g. a git commit id."

  validation {
    condition     = can(regex("^[A-Za-z0-9._-]{1,128}$", var.image_tag)) && var.image_tag != "latest"
    error_message = "image_tag must be an image tag other than latest."
  }
}

variable "architecture" {
  type        = string
  description = "CPU architecture the image was built for (X86_64 or ARM64)."
  default     = "X86_64"

  validation {
    condition     = contains(["X86_64", "ARM64"], var.architecture)
    error_message = "architecture must be X86_64 or ARM64."
  }
}

variable "certificate_arn" {
  type        = string
  description = "ACM certificate of the HTTPS listeners (the names engines and operators use)."

  validation {
    condition     = can(regex("^arn:aws[a-z-]*:acm:", var.certificate_arn))
    error_message = "certificate_arn must be an ACM certificate ARN."
  }
}

variable "meta_ingress_cidrs" {
  type        = list(string)
  description = "Networks of the inference engines (meta plane, runtime ecs)."
  default     = ["10.0.0.0/8"]

  validation {
    condition     = alltrue([for c in var.meta_ingress_cidrs : can(cidrhost(c, 0)) && tonumber(split("/", c)[1]) >= 8])
    error_message = "meta_ingress_cidrs must be IPv4 CIDR blocks no larger than /8."
  }
}

variable "admin_ingress_cidrs" {
  type        = list(string)
  description = "Operator networks (VPN, bastion) of the admin plane."

  validation {
    condition     = length(var.admin_ingress_cidrs) > 0 && alltrue([for c in var.admin_ingress_cidrs : can(cidrhost(c, 0)) && tonumber(split("/", c)[1]) >= 8])
    error_message = "admin_ingress_cidrs must list IPv4 CIDR blocks no larger than /8."
  }
}

variable "vpc_cidr" {
  type        = string
  description = "CIDR block of the VPC this example creates."
  default     = "10.40.0.0/16"

  validation {
    condition     = can(cidrhost(var.vpc_cidr, 0))
    error_message = "vpc_cidr must be an IPv4 CIDR block."
  }
}

variable "valkey_node_type" {
  type        = string
  description = "ElastiCache node type of the Valkey nodes."
  default     = "cache.r7g.large"

  validation {
    condition     = startswith(var.valkey_node_type, "cache.")
    error_message = "valkey_node_type must be an ElastiCache node type."
  }
}

variable "valkey_shards" {
  type        = number
  description = "Valkey shards (node groups)."
  default     = 3

  validation {
    condition     = var.valkey_shards >= 1 && var.valkey_shards <= 500
    error_message = "valkey_shards must be from 1 to 500."
  }
}

variable "valkey_replicas_per_shard" {
  type        = number
  description = "Replicas per Valkey shard (at least 1 for failover)."
  default     = 1

  validation {
    condition     = var.valkey_replicas_per_shard >= 1 && var.valkey_replicas_per_shard <= 5
    error_message = "valkey_replicas_per_shard must be from 1 to 5."
  }
}

variable "api_min_tasks" {
  type        = number
  description = "Fewest kvcm-api tasks (runtime ecs)."
  default     = 2

  validation {
    condition     = var.api_min_tasks >= 1
    error_message = "api_min_tasks must be at least 1."
  }
}

variable "api_max_tasks" {
  type        = number
  description = "Most kvcm-api tasks (runtime ecs)."
  default     = 10

  validation {
    condition     = var.api_max_tasks >= 1
    error_message = "api_max_tasks must be at least 1."
  }
}

variable "api_task_cpu" {
  type        = number
  description = "Fargate CPU units of a kvcm-api task (1024 = 1 vCPU; runtime ecs). docs/deploy.md sizes ~3k 128-block reads/s per vCPU."
  default     = 1024

  validation {
    condition     = contains([256, 512, 1024, 2048, 4096, 8192, 16384], var.api_task_cpu)
    error_message = "api_task_cpu must be a Fargate CPU size: 256, 512, 1024, 2048, 4096, 8192 or 16384."
  }
}

variable "api_task_memory" {
  type        = number
  description = "Memory (MiB) of a kvcm-api task (runtime ecs); must be valid for api_task_cpu."
  default     = 2048

  validation {
    condition     = var.api_task_memory >= 512 && var.api_task_memory <= 122880
    error_message = "api_task_memory must be from 512 to 122880 MiB."
  }
}

variable "lambda_reserved_concurrency" {
  type        = number
  description = "Reserved concurrency of the meta-plane function (runtime lambda): peak reads/s x ~1 ms x 1.5 (docs/deploy.md); the account's Lambda concurrency quota must be above it."
  default     = 200

  validation {
    condition     = var.lambda_reserved_concurrency >= 1
    error_message = "lambda_reserved_concurrency must be at least 1."
  }
}

variable "api_throttling_rate_limit" {
  type        = number
  description = "Steady-state requests/s the meta plane's HTTP API admits (runtime lambda). API Gateway's account quota (10,000 requests/s per region by default) caps it: raise the quota first for more."
  default     = 5000

  validation {
    condition     = var.api_throttling_rate_limit > 0
    error_message = "api_throttling_rate_limit must be positive."
  }
}

variable "api_throttling_burst_limit" {
  type        = number
  description = "Burst of requests the meta plane's HTTP API admits (runtime lambda); capped by the account's burst quota (5,000 by default)."
  default     = 5000

  validation {
    condition     = var.api_throttling_burst_limit > 0
    error_message = "api_throttling_burst_limit must be positive."
  }
}

variable "valkey_auth_token_version" {
  type        = number
  description = "AUTH token generation: bump it to rotate the token (apply with valkey_auth_token_update_strategy = ROTATE, then again with SET; docs/deploy.md). The kvcm tasks and functions roll onto the new token once ElastiCache has it."
  default     = 1

  validation {
    condition     = var.valkey_auth_token_version >= 1 && floor(var.valkey_auth_token_version) == var.valkey_auth_token_version
    error_message = "valkey_auth_token_version must be a positive whole number."
  }
}

variable "valkey_auth_token_update_strategy" {
  type        = string
  description = "How a changed AUTH token is applied: ROTATE (old and new both valid, while the kvcm processes roll) or SET (only the new one: the second apply of a rotation)."
  default     = "ROTATE"

  validation {
    condition     = contains(["ROTATE", "SET"], var.valkey_auth_token_update_strategy)
    error_message = "valkey_auth_token_update_strategy must be ROTATE or SET."
  }
}

variable "worker_min_tasks" {
  type        = number
  description = "Fewest kvcm-worker tasks."
  default     = 2

  validation {
    condition     = var.worker_min_tasks >= 1
    error_message = "worker_min_tasks must be at least 1."
  }
}

variable "worker_max_tasks" {
  type        = number
  description = "Most kvcm-worker tasks."
  default     = 10

  validation {
    condition     = var.worker_max_tasks >= 1
    error_message = "worker_max_tasks must be at least 1."
  }
}

variable "startup_config" {
  type        = string
  description = "Tair-format startup JSON (storages and instance groups) kvcm-api applies at start; empty for none."
  default     = ""

  validation {
    condition     = var.startup_config == "" || can(jsondecode(var.startup_config))
    error_message = "startup_config must be empty or JSON."
  }
}

variable "alarm_emails" {
  type        = list(string)
  description = "E-mail addresses that receive the alarms."
  default     = []

  validation {
    condition     = alltrue([for e in var.alarm_emails : can(regex("^[^@\\s]+@[^@\\s]+$", e))])
    error_message = "alarm_emails must be e-mail addresses."
  }
}

variable "tags" {
  type        = map(string)
  description = "Tags added to every resource (provider default_tags)."
  default     = {}
}
