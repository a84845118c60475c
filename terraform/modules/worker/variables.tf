variable "name" {
  type        = string
  description = "Name prefix of every resource (the same as the other modules')."

  validation {
    condition     = can(regex("^[a-z][a-z0-9-]{1,18}[a-z0-9]$", var.name))
    error_message = "name must be 3-20 characters of lower-case letters, digits and hyphens, starting with a letter."
  }
}

variable "vpc_id" {
  type        = string
  description = "VPC of the worker tasks."

  validation {
    condition     = can(regex("^vpc-[0-9a-f]+$", var.vpc_id))
    error_message = "vpc_id must look like vpc-0123abcd."
  }
}

variable "vpc_cidr" {
  type        = string
  description = "CIDR block of the VPC (NFS egress to the EFS mount targets of storage_volumes)."

  validation {
    condition     = can(cidrhost(var.vpc_cidr, 0))
    error_message = "vpc_cidr must be an IPv4 CIDR block."
  }
}

variable "subnet_ids" {
  type        = list(string)
  description = "Private subnets of the worker tasks (at least two AZs)."

  validation {
    condition     = length(var.subnet_ids) >= 2
    error_message = "Give private subnets in at least two availability zones."
  }
}

variable "ecs_cluster_arn" {
  type        = string
  description = "ECS cluster of the kvcm-worker service. It must have Container Insights on: autoscaling divides the backlog by its RunningTaskCount."

  validation {
    condition     = can(regex("^arn:aws[a-z-]*:ecs:[a-z0-9-]+:[0-9]{12}:cluster/.+$", var.ecs_cluster_arn))
    error_message = "ecs_cluster_arn must be an ECS cluster ARN."
  }
}

variable "image" {
  type        = string
  description = "kvcm container image (infra/Dockerfile) in ECR, by immutable tag or digest; the same image as kvcm-api."

  validation {
    condition     = can(regex("^[0-9]{12}\\.dkr\\.ecr\\.[a-z0-9-]+\\.amazonaws\\.com(\\.cn)?/[a-z0-9._/-]+(:[A-Za-z0-9._-]+|@sha256:[0-9a-f]{64})$", var.image)) && !endswith(var.image, ":latest")
    error_message = "image must be an ECR image reference with a tag (not latest) or a sha256 digest."
  }
}

variable "ecr_repository_arn" {
  type        = string
  description = "ARN of the ECR repository of the image (the only one the execution role may pull from)."

  validation {
    condition     = can(regex("^arn:aws[a-z-]*:ecr:[a-z0-9-]+:[0-9]{12}:repository/.+$", var.ecr_repository_arn))
    error_message = "ecr_repository_arn must be an ECR repository ARN."
  }
}

variable "architecture" {
  type        = string
  description = "CPU architecture of the image: X86_64 or ARM64."
  default     = "X86_64"

  validation {
    condition     = contains(["X86_64", "ARM64"], var.architecture)
    error_message = "architecture must be X86_64 or ARM64."
  }
}

variable "adot_image" {
  type        = string
  description = "AWS Distro for OpenTelemetry collector image of the metrics sidecar (scrapes the worker's /metrics, publishes CloudWatch metrics through EMF)."
  default     = "public.ecr.aws/aws-observability/aws-otel-collector:v0.47.0"

  validation {
    condition     = can(regex(":v[0-9]+\\.[0-9]+\\.[0-9]+$|@sha256:[0-9a-f]{64}$", var.adot_image))
    error_message = "adot_image must be pinned to a version tag (vX.Y.Z) or a digest."
  }
}

variable "cpu" {
  type        = number
  description = "Fargate CPU units of a worker task (worker + sidecar)."
  default     = 512

  validation {
    condition     = contains([256, 512, 1024, 2048, 4096, 8192, 16384], var.cpu)
    error_message = "cpu must be a Fargate CPU size: 256, 512, 1024, 2048, 4096, 8192 or 16384."
  }
}

variable "memory" {
  type        = number
  description = "Memory (MiB) of a worker task; must be valid for the chosen cpu."
  default     = 1024

  validation {
    condition     = var.memory >= 512 && var.memory <= 122880
    error_message = "memory must be from 512 to 122880 MiB."
  }
}

variable "min_capacity" {
  type        = number
  description = "Fewest worker tasks. At least 1 (someone must expire sessions and reclaim); 2 survive the loss of an AZ."
  default     = 2

  validation {
    condition     = var.min_capacity >= 1
    error_message = "min_capacity must be at least 1: with no worker nothing publishes the backlog to scale on."
  }
}

variable "max_capacity" {
  type        = number
  description = "Most worker tasks. Throughput grows about linearly with workers (docs/benchmarks.md: 1.85x with 2)."
  default     = 10

  validation {
    condition     = var.max_capacity >= 1 && var.max_capacity <= 200
    error_message = "max_capacity must be from 1 to 200."
  }
}

variable "backlog_per_worker_target" {
  type        = number
  description = "Deletion backlog (entries in the deletion streams, kvcm_worker_deletion_stream_length summed over instances) per running worker that autoscaling holds. One worker deleted ~3,500 blocks/s from a local disk (docs/benchmarks.md); network filesystems are slower."
  default     = 20000

  validation {
    condition     = var.backlog_per_worker_target >= 100
    error_message = "backlog_per_worker_target must be at least 100."
  }
}

variable "valkey_url" {
  type        = string
  description = "KVCM_VALKEY_URL: rediss:// URL of the cluster's configuration endpoint, without credentials."

  validation {
    condition     = startswith(var.valkey_url, "rediss://") && !strcontains(var.valkey_url, "@")
    error_message = "valkey_url must be a rediss:// (TLS) URL without credentials (the password comes from KVCM_VALKEY_PASSWORD)."
  }
}

variable "valkey_client_security_group_id" {
  type        = string
  description = "The Valkey clients security group (valkey module output client_security_group_id)."
}

variable "valkey_auth_secret_arn" {
  type        = string
  description = "Secrets Manager secret of the Valkey AUTH token (KVCM_VALKEY_PASSWORD)."

  validation {
    condition     = can(regex("^arn:aws[a-z-]*:secretsmanager:", var.valkey_auth_secret_arn))
    error_message = "valkey_auth_secret_arn must be a Secrets Manager secret ARN."
  }
}

variable "valkey_kms_key_arn" {
  type        = string
  description = "KMS key of the Valkey AUTH token secret."

  validation {
    condition     = can(regex("^arn:aws[a-z-]*:kms:", var.valkey_kms_key_arn))
    error_message = "valkey_kms_key_arn must be a KMS key ARN."
  }
}

variable "namespace" {
  type        = string
  description = "KVCM_NAMESPACE: the same as kvcm-api's."
  default     = "kvcm"

  validation {
    condition     = can(regex("^[A-Za-z0-9_.:-]{1,64}$", var.namespace))
    error_message = "namespace must be 1-64 characters of letters, digits, _ . : -."
  }
}

variable "log_level" {
  type        = string
  description = "KVCM_LOG_LEVEL of the worker."
  default     = "info"

  validation {
    condition     = can(regex("^[A-Za-z0-9_=,:.]+$", var.log_level))
    error_message = "log_level must be an EnvFilter directive such as info."
  }
}

variable "secrets_version" {
  type        = number
  description = "Generation of the secrets this module's processes read at start (the valkey module's auth_token_version output). A change rolls the ECS tasks (and Lambda functions) so each reads the current secrets; no secret value is involved."
  default     = 1

  validation {
    condition     = var.secrets_version >= 1 && floor(var.secrets_version) == var.secrets_version
    error_message = "secrets_version must be a positive whole number."
  }
}

variable "extra_environment" {
  type        = map(string)
  description = "More worker configuration as KVCM_WORKER__<KEY> (or KVCM_<KEY>) variables, e.g. KVCM_WORKER__DELETE_BATCH. Not for secrets."
  default     = {}

  validation {
    condition     = alltrue([for k in keys(var.extra_environment) : can(regex("^KVCM_[A-Z0-9_]+$", k)) && !can(regex("PASSWORD|TOKEN|SECRET", k))])
    error_message = "extra_environment keys must be KVCM_ names and never carry a password, token or secret."
  }
}

variable "storage_volumes" {
  type = list(object({
    name            = string
    file_system_id  = string
    access_point_id = string
    container_path  = string
  }))
  description = "EFS file systems holding file-like storages (type file/nfs), mounted in the worker at container_path (the storage's root_path): the worker deletes blocks there. Mounted with TLS and IAM authorization through the access point (whose POSIX user should be 10001)."
  default     = []

  validation {
    condition = alltrue([for v in var.storage_volumes :
      can(regex("^fs-[0-9a-f]+$", v.file_system_id)) && can(regex("^fsap-[0-9a-f]+$", v.access_point_id)) && startswith(v.container_path, "/")
    ])
    error_message = "storage_volumes need fs-... ids, fsap-... access points and absolute container paths."
  }
}

variable "log_group_name" {
  type        = string
  description = "Log group of the worker and sidecar containers (observability output log_group_names.worker)."
}

variable "log_group_arn" {
  type        = string
  description = "ARN of log_group_name."
}

variable "metrics_log_group_name" {
  type        = string
  description = "Log group the sidecar writes the EMF metric events to (observability output log_group_names.worker_metrics)."
}

variable "metrics_log_group_arn" {
  type        = string
  description = "ARN of metrics_log_group_name."
}

variable "metrics_namespace" {
  type        = string
  description = "CloudWatch namespace of the worker's metrics (the observability module's)."
  default     = "kvcm"

  validation {
    condition     = can(regex("^[A-Za-z0-9._/#:-]{1,255}$", var.metrics_namespace)) && !startswith(var.metrics_namespace, "AWS/")
    error_message = "metrics_namespace must be a custom CloudWatch namespace (not AWS/...)."
  }
}

variable "tags" {
  type        = map(string)
  description = "Tags added to every resource."
  default     = {}
}
