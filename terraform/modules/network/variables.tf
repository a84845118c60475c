variable "name" {
  type        = string
  description = "Name prefix of every resource (e.g. \"kvcm-prod\")."

  validation {
    condition     = can(regex("^[a-z][a-z0-9-]{1,18}[a-z0-9]$", var.name))
    error_message = "name must be 3-20 characters of lower-case letters, digits and hyphens, starting with a letter."
  }
}

variable "create_vpc" {
  type        = bool
  description = "Create a VPC with public and private subnets across availability zones. false = bring your own: set existing_vpc_id and existing_private_subnet_ids."
  default     = true
}

variable "vpc_cidr" {
  type        = string
  description = "CIDR block of the created VPC (create_vpc = true). Private subnets take the first /20s of it, public subnets /24s near its end."
  default     = "10.40.0.0/16"

  validation {
    condition     = can(cidrhost(var.vpc_cidr, 0)) && tonumber(split("/", var.vpc_cidr)[1]) <= 17
    error_message = "vpc_cidr must be a valid IPv4 CIDR block of size /17 or larger (room for six /20 private subnets)."
  }
}

variable "az_count" {
  type        = number
  description = "Number of availability zones to spread the subnets over (ElastiCache Multi-AZ and the load balancers need at least 2)."
  default     = 3

  validation {
    condition     = var.az_count >= 2 && var.az_count <= 6 && floor(var.az_count) == var.az_count
    error_message = "az_count must be a whole number from 2 to 6."
  }
}

variable "single_nat_gateway" {
  type        = bool
  description = "One NAT gateway for all private subnets (cheaper) instead of one per availability zone (survives the loss of an AZ)."
  default     = false
}

variable "enable_interface_endpoints" {
  type        = bool
  description = "Create VPC interface endpoints for Secrets Manager, ECR, CloudWatch Logs and KMS, so the tasks and functions reach them without the NAT gateway."
  default     = true
}

variable "enable_flow_logs" {
  type        = bool
  description = "Send the VPC's flow logs to flow_log_group_arn (create_vpc only). A plain switch, so the plan knows the count before the log group exists."
  default     = true
}

variable "flow_log_group_arn" {
  type        = string
  description = "ARN of the CloudWatch log group receiving the VPC flow logs (created by the observability module); required when enable_flow_logs is true."
  default     = null

  validation {
    condition     = var.flow_log_group_arn == null || can(regex("^arn:aws[a-z-]*:logs:", var.flow_log_group_arn))
    error_message = "flow_log_group_arn must be a CloudWatch Logs log group ARN or null."
  }
}

variable "existing_vpc_id" {
  type        = string
  description = "VPC to deploy into when create_vpc = false."
  default     = null

  validation {
    condition     = var.existing_vpc_id == null || can(regex("^vpc-[0-9a-f]+$", var.existing_vpc_id))
    error_message = "existing_vpc_id must look like vpc-0123abcd."
  }
}

variable "existing_private_subnet_ids" {
  type        = list(string)
  description = "Private subnets (no route from the internet, at least two availability zones) for kvcm and Valkey when create_vpc = false."
  default     = []

  validation {
    condition     = alltrue([for s in var.existing_private_subnet_ids : can(regex("^subnet-[0-9a-f]+$", s))])
    error_message = "existing_private_subnet_ids must be subnet ids (subnet-0123abcd)."
  }
}

variable "tags" {
  type        = map(string)
  description = "Tags added to every resource."
  default     = {}
}
