terraform {
  required_version = ">= 1.6.0, < 2.0.0"

  required_providers {
    aws = {
      source  = "hashicorp/aws"
      version = "~> 6.0"
    }
    random = {
      source  = "hashicorp/random"
      version = "~> 3.6"
    }
  }

  # State holds the generated Valkey AUTH token and admin password (ElastiCache takes the token
  # as a plain argument): keep it in an encrypted, access-restricted backend, e.g.
  # backend "s3" { bucket = "...", key = "kvcm/terraform.tfstate", region = "...", encrypt = true, kms_key_id = "...", use_lockfile = true }
}

provider "aws" {
  region = var.region

  default_tags {
    tags = merge(var.tags, { Application = "kvcm", Deployment = var.name })
  }
}
