variable "name" {
  type        = string
  description = "Name prefix of every resource (the same as the other modules')."

  validation {
    condition     = can(regex("^[a-z][a-z0-9-]{1,18}[a-z0-9]$", var.name))
    error_message = "name must be 3-20 characters of lower-case letters, digits and hyphens, starting with a letter."
  }
}

variable "runtime" {
  type        = string
  description = "Where the meta plane runs: \"ecs\" (Fargate service behind an internal ALB; it serves the admin plane too) or \"lambda\" (a function behind an API Gateway HTTP API; the admin plane is a second function behind the internal admin ALB)."
  default     = "ecs"

  validation {
    condition     = contains(["ecs", "lambda"], var.runtime)
    error_message = "runtime must be \"ecs\" or \"lambda\"."
  }
}

variable "vpc_id" {
  type        = string
  description = "VPC of the load balancers, tasks and functions."

  validation {
    condition     = can(regex("^vpc-[0-9a-f]+$", var.vpc_id))
    error_message = "vpc_id must look like vpc-0123abcd."
  }
}

variable "subnet_ids" {
  type        = list(string)
  description = "Private subnets (at least two AZs) of the internal load balancers, tasks and functions. Never public subnets: nothing of kvcm gets a public address."

  validation {
    condition     = length(var.subnet_ids) >= 2
    error_message = "Give private subnets in at least two availability zones."
  }
}

variable "image" {
  type        = string
  description = "kvcm container image (built from infra/Dockerfile) in ECR, by immutable tag or digest, e.g. 123456789012.dkr.ecr.eu-west-1.amazonaws.com/kvcm@sha256:..."

  validation {
    condition     = can(regex("^[0-9]{12}\\.dkr\\.ecr\\.[a-z0-9-]+\\.amazonaws\\.com(\\.cn)?/[a-z0-9._/-]+(:[A-Za-z0-9._-]+|@sha256:[0-9a-f]{64})$", var.image)) && !endswith(var.image, ":latest")
    error_message = "image must be an ECR image reference with a tag (not latest) or a sha256 digest."
  }
}

variable "ecr_repository_arn" {
  type        = string
  description = "ARN of the ECR repository of the image: the only repository the task execution role may pull from."

  validation {
    condition     = can(regex("^arn:aws[a-z-]*:ecr:[a-z0-9-]+:[0-9]{12}:repository/.+$", var.ecr_repository_arn))
    error_message = "ecr_repository_arn must be an ECR repository ARN."
  }
}

variable "architecture" {
  type        = string
  description = "CPU architecture the image was built for: X86_64 or ARM64 (Graviton)."
  default     = "X86_64"

  validation {
    condition     = contains(["X86_64", "ARM64"], var.architecture)
    error_message = "architecture must be X86_64 or ARM64."
  }
}

variable "ecs_cluster_arn" {
  type        = string
  description = "ECS cluster of the kvcm-api service (runtime = ecs)."
  default     = null
}

variable "certificate_arn" {
  type        = string
  description = "ACM certificate of the load balancers' HTTPS listeners (ACM private CA for internal names, or public). TLS is required: engines and operators send API keys and passwords in headers."

  validation {
    condition     = can(regex("^arn:aws[a-z-]*:acm:[a-z0-9-]+:[0-9]{12}:certificate/.+$", var.certificate_arn))
    error_message = "certificate_arn must be an ACM certificate ARN."
  }
}

variable "ssl_policy" {
  type        = string
  description = "TLS policy of the HTTPS listeners."
  default     = "ELBSecurityPolicy-TLS13-1-2-2021-06"

  validation {
    condition     = startswith(var.ssl_policy, "ELBSecurityPolicy-TLS13-") || startswith(var.ssl_policy, "ELBSecurityPolicy-FS-1-2-")
    error_message = "ssl_policy must be a TLS 1.2+ policy (ELBSecurityPolicy-TLS13-* or ELBSecurityPolicy-FS-1-2-*)."
  }
}

variable "meta_ingress_cidrs" {
  type        = list(string)
  description = "Networks of the inference engines, allowed to reach the meta plane's internal ALB on 443 (runtime = ecs)."
  default     = []

  validation {
    condition     = alltrue([for c in var.meta_ingress_cidrs : can(cidrhost(c, 0)) && tonumber(split("/", c)[1]) >= 8])
    error_message = "meta_ingress_cidrs must be IPv4 CIDR blocks no larger than /8 (never 0.0.0.0/0)."
  }
}

variable "admin_ingress_cidrs" {
  type        = list(string)
  description = "Operator networks (VPN, bastion) allowed to reach the admin plane's internal ALB on 443. The admin plane is never public."

  validation {
    condition     = length(var.admin_ingress_cidrs) > 0 && alltrue([for c in var.admin_ingress_cidrs : can(cidrhost(c, 0)) && tonumber(split("/", c)[1]) >= 8])
    error_message = "admin_ingress_cidrs must list at least one IPv4 CIDR block no larger than /8 (never 0.0.0.0/0)."
  }
}

variable "alb_idle_timeout" {
  type        = number
  description = "Idle timeout of the ALBs in seconds; kvcm's idle_timeout_ms is set 15 s longer so the balancer closes idle connections first (see core/config/default.toml)."
  default     = 60

  validation {
    condition     = var.alb_idle_timeout >= 1 && var.alb_idle_timeout <= 300
    error_message = "alb_idle_timeout must be from 1 to 300 seconds (kvcm's idle timeout must stay below NLB's 350 s)."
  }
}

variable "deletion_protection" {
  type        = bool
  description = "Protect the load balancers from deletion."
  default     = true
}

variable "alb_access_logs_bucket" {
  type        = string
  description = "S3 bucket for the ALBs' access logs (must allow ELB log delivery). Null: no access logs."
  default     = null
}

variable "desired_count" {
  type        = number
  description = "kvcm-api tasks at first deploy (runtime = ecs); autoscaling moves it between min_capacity and max_capacity."
  default     = 2

  validation {
    condition     = var.desired_count >= 1
    error_message = "desired_count must be at least 1."
  }
}

variable "min_capacity" {
  type        = number
  description = "Fewest kvcm-api tasks (runtime = ecs). At least 2 for availability across AZs."
  default     = 2

  validation {
    condition     = var.min_capacity >= 1
    error_message = "min_capacity must be at least 1."
  }
}

variable "max_capacity" {
  type        = number
  description = "Most kvcm-api tasks (runtime = ecs)."
  default     = 10

  validation {
    condition     = var.max_capacity >= 1 && var.max_capacity <= 1000
    error_message = "max_capacity must be from 1 to 1000."
  }
}

variable "cpu_target_percent" {
  type        = number
  description = "Average CPU utilization the kvcm-api service is scaled to hold (runtime = ecs)."
  default     = 60

  validation {
    condition     = var.cpu_target_percent >= 10 && var.cpu_target_percent <= 90
    error_message = "cpu_target_percent must be from 10 to 90."
  }
}

variable "cpu" {
  type        = number
  description = "Fargate CPU units of a kvcm-api task (1024 = 1 vCPU)."
  default     = 1024

  validation {
    condition     = contains([256, 512, 1024, 2048, 4096, 8192, 16384], var.cpu)
    error_message = "cpu must be a Fargate CPU size: 256, 512, 1024, 2048, 4096, 8192 or 16384."
  }
}

variable "memory" {
  type        = number
  description = "Memory (MiB) of a kvcm-api task; must be valid for the chosen cpu."
  default     = 2048

  validation {
    condition     = var.memory >= 512 && var.memory <= 122880
    error_message = "memory must be from 512 to 122880 MiB."
  }
}

variable "lambda_memory_mb" {
  type        = number
  description = "Memory of each Lambda function (runtime = lambda); CPU grows with it."
  default     = 1024

  validation {
    condition     = var.lambda_memory_mb >= 128 && var.lambda_memory_mb <= 10240
    error_message = "lambda_memory_mb must be from 128 to 10240."
  }
}

variable "lambda_timeout_s" {
  type        = number
  description = "Timeout of each Lambda invocation; above kvcm's request_timeout_ms (10 s)."
  default     = 15

  validation {
    condition     = var.lambda_timeout_s >= 11 && var.lambda_timeout_s <= 29
    error_message = "lambda_timeout_s must be from 11 (above request_timeout_ms) to 29 (API Gateway's integration limit)."
  }
}

variable "lambda_reserved_concurrency" {
  type        = number
  description = "Reserved concurrency of the meta-plane function (runtime = lambda): caps the Valkey connections the functions open."
  default     = 200

  validation {
    condition     = var.lambda_reserved_concurrency >= 1
    error_message = "lambda_reserved_concurrency must be at least 1."
  }
}

variable "lambda_max_location_specs_per_response" {
  type        = number
  description = "runtime = lambda: most location specs one reply of the meta function may carry (kvcm's max_location_specs_per_response), so that every reply fits Lambda's 6 MB response payload (~150 bytes of JSON per spec); the admin function, behind the ALB's 1 MB, gets at most 5,000."
  default     = 20000

  validation {
    condition     = var.lambda_max_location_specs_per_response >= 1 && var.lambda_max_location_specs_per_response <= 30000
    error_message = "lambda_max_location_specs_per_response must be within 1..30000 (larger replies would not fit Lambda's 6 MB)."
  }
}

variable "api_throttling_rate_limit" {
  type        = number
  description = "Steady-state requests per second the HTTP API admits (runtime = lambda)."
  default     = 5000

  validation {
    condition     = var.api_throttling_rate_limit > 0
    error_message = "api_throttling_rate_limit must be positive."
  }
}

variable "api_throttling_burst_limit" {
  type        = number
  description = "Burst of requests the HTTP API admits (runtime = lambda)."
  default     = 10000

  validation {
    condition     = var.api_throttling_burst_limit > 0
    error_message = "api_throttling_burst_limit must be positive."
  }
}

variable "valkey_url" {
  type        = string
  description = "KVCM_VALKEY_URL: rediss:// URL of the cluster's configuration endpoint (valkey module output valkey_url), without credentials."

  validation {
    condition     = startswith(var.valkey_url, "rediss://") && !strcontains(var.valkey_url, "@")
    error_message = "valkey_url must be a rediss:// (TLS) URL without credentials (the password comes from KVCM_VALKEY_PASSWORD)."
  }
}

variable "valkey_client_security_group_id" {
  type        = string
  description = "The Valkey clients security group (valkey module output client_security_group_id), attached to the tasks and functions."
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
  description = "KMS key of the Valkey AUTH token secret (kms:Decrypt is granted on it)."

  validation {
    condition     = can(regex("^arn:aws[a-z-]*:kms:", var.valkey_kms_key_arn))
    error_message = "valkey_kms_key_arn must be a KMS key ARN."
  }
}

variable "namespace" {
  type        = string
  description = "KVCM_NAMESPACE: prefix of every key kvcm writes (several deployments can share a cluster). The workers must use the same."
  default     = "kvcm"

  validation {
    condition     = can(regex("^[A-Za-z0-9_.:-]{1,64}$", var.namespace))
    error_message = "namespace must be 1-64 characters of letters, digits, _ . : -."
  }
}

variable "log_level" {
  type        = string
  description = "KVCM_LOG_LEVEL (tracing EnvFilter syntax, e.g. info or info,kvcm_api=debug)."
  default     = "info"

  validation {
    condition     = can(regex("^[A-Za-z0-9_=,:.]+$", var.log_level))
    error_message = "log_level must be an EnvFilter directive such as info."
  }
}

variable "bootstrap_admin_user" {
  type        = string
  description = "KVCM_BOOTSTRAP_ADMIN_USER: the admin account created at first start; its generated password is in the admin_password_secret_arn secret. Later password changes go through the admin plane (kvcm never changes an existing account)."
  default     = "admin"

  validation {
    condition     = can(regex("^[A-Za-z0-9._:-]{1,128}$", var.bootstrap_admin_user)) && !contains([".", ".."], var.bootstrap_admin_user)
    error_message = "bootstrap_admin_user must be a kvcm account name: 1-128 of [A-Za-z0-9._:-], not . or .."
  }
}

variable "startup_config" {
  type        = string
  description = "KVCM_STARTUP_CONFIG: Tair-format JSON (storage_config + instance_group) applied idempotently at start. Empty: none."
  default     = ""

  validation {
    condition     = var.startup_config == "" || can(jsondecode(var.startup_config))
    error_message = "startup_config must be empty or JSON."
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
  description = "More kvcm configuration as KVCM_<KEY> variables (keys of core/config/default.toml, e.g. KVCM_MAX_KEYS_PER_REQUEST). Not for secrets."
  default     = {}

  validation {
    condition     = alltrue([for k in keys(var.extra_environment) : can(regex("^KVCM_[A-Z0-9_]+$", k)) && !can(regex("PASSWORD|TOKEN|SECRET", k))])
    error_message = "extra_environment keys must be KVCM_<KEY> names and never carry a password, token or secret."
  }
}

variable "ecs_log_group_name" {
  type        = string
  description = "Log group of the kvcm-api tasks (observability output log_group_names.api)."
}

variable "ecs_log_group_arn" {
  type        = string
  description = "ARN of ecs_log_group_name (the task execution role may write only there)."
}

variable "lambda_log_group_names" {
  type        = object({ meta = string, admin = string })
  description = "Log groups of the meta and admin functions (runtime = lambda)."
}

variable "lambda_log_group_arns" {
  type        = object({ meta = string, admin = string })
  description = "ARNs of lambda_log_group_names."
}

variable "apigw_access_log_group_arn" {
  type        = string
  description = "Log group of the HTTP API's access logs (runtime = lambda)."
}

variable "tags" {
  type        = map(string)
  description = "Tags added to every resource."
  default     = {}
}
