output "meta_endpoint" {
  description = "Base URL of the meta plane for the engines' connectors (internal ALB, or the HTTP API's endpoint). Point a DNS name of the certificate at it."
  value       = var.runtime == "ecs" ? "https://${aws_lb.meta[0].dns_name}" : aws_apigatewayv2_api.meta[0].api_endpoint
}

output "admin_endpoint" {
  description = "Base URL of the admin plane (internal ALB, reachable from admin_ingress_cidrs only)."
  value       = "https://${aws_lb.admin.dns_name}"
}

output "meta_alb_dns_name" {
  description = "DNS name of the meta plane's internal ALB (runtime = ecs; null otherwise)."
  value       = var.runtime == "ecs" ? aws_lb.meta[0].dns_name : null
}

output "meta_alb_zone_id" {
  description = "Hosted zone id of the meta ALB, for an alias record (runtime = ecs)."
  value       = var.runtime == "ecs" ? aws_lb.meta[0].zone_id : null
}

output "admin_alb_dns_name" {
  description = "DNS name of the admin plane's internal ALB."
  value       = aws_lb.admin.dns_name
}

output "admin_alb_zone_id" {
  description = "Hosted zone id of the admin ALB, for an alias record."
  value       = aws_lb.admin.zone_id
}

output "meta_alb_arn_suffix" {
  description = "ARN suffix of the meta ALB (CloudWatch LoadBalancer dimension; runtime = ecs)."
  value       = var.runtime == "ecs" ? aws_lb.meta[0].arn_suffix : null
}

output "admin_alb_arn_suffix" {
  description = "ARN suffix of the admin ALB (CloudWatch LoadBalancer dimension)."
  value       = aws_lb.admin.arn_suffix
}

output "api_gateway_id" {
  description = "Id of the meta plane's HTTP API (runtime = lambda)."
  value       = var.runtime == "lambda" ? aws_apigatewayv2_api.meta[0].id : null
}

output "meta_function_name" {
  description = "Meta-plane function (runtime = lambda)."
  value       = var.runtime == "lambda" ? aws_lambda_function.plane["meta"].function_name : null
}

output "admin_function_name" {
  description = "Admin-plane function (runtime = lambda)."
  value       = var.runtime == "lambda" ? aws_lambda_function.plane["admin"].function_name : null
}

output "function_arns" {
  description = "ARNs of the functions by plane (runtime = lambda; empty otherwise), for the ECR repository policy."
  value       = { for k, f in aws_lambda_function.plane : k => f.arn }
}

output "service_name" {
  description = "ECS service of kvcm-api (runtime = ecs)."
  value       = var.runtime == "ecs" ? aws_ecs_service.this[0].name : null
}

output "bootstrap_admin_user" {
  description = "Name of the bootstrap admin account."
  value       = var.bootstrap_admin_user
}

output "admin_password_secret_arn" {
  description = "Secrets Manager secret with the bootstrap admin's password (aws secretsmanager get-secret-value --secret-id ...)."
  value       = aws_secretsmanager_secret.admin_password.arn
}

output "environment" {
  description = "The kvcm configuration (KVCM_* variables, no secrets) the tasks and functions get (the ECS tasks also KVCM_SERVING_THREADS: one per vCPU unless extra_environment sets it)."
  value       = local.environment
}
