output "ecr_repository_url" {
  description = "Push the kvcm image here (docker build -f infra/Dockerfile; docker push <url>:<image_tag>)."
  value       = aws_ecr_repository.kvcm.repository_url
}

output "meta_endpoint" {
  description = "Meta-plane base URL for the engines' connectors."
  value       = module.api.meta_endpoint
}

output "admin_endpoint" {
  description = "Admin-plane base URL (internal; from admin_ingress_cidrs only)."
  value       = module.api.admin_endpoint
}

output "bootstrap_admin_user" {
  description = "The first admin account."
  value       = module.api.bootstrap_admin_user
}

output "admin_password_secret_arn" {
  description = "Secrets Manager secret with the first admin's password."
  value       = module.api.admin_password_secret_arn
}

output "valkey_configuration_endpoint" {
  description = "Configuration endpoint of the Valkey cluster (TLS, AUTH)."
  value       = module.valkey.configuration_endpoint_address
}

output "valkey_auth_token_secret_arn" {
  description = "Secrets Manager secret with the Valkey AUTH token."
  value       = module.valkey.auth_token_secret_arn
}

output "ecs_cluster_name" {
  description = "ECS cluster of the kvcm services."
  value       = aws_ecs_cluster.this.name
}

output "alarm_topic_arn" {
  description = "SNS topic of the alarms."
  value       = module.observability.alarm_topic_arn
}

output "dashboard_name" {
  description = "CloudWatch dashboard."
  value       = module.observability.dashboard_name
}
