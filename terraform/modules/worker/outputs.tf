output "service_name" {
  description = "ECS service of kvcm-worker."
  value       = aws_ecs_service.this.name
}

output "security_group_id" {
  description = "Security group of the worker tasks (allow it on the storages' EFS mount targets)."
  value       = aws_security_group.tasks.id
}

output "task_role_arn" {
  description = "Task role of the worker (grant it access to further storages)."
  value       = aws_iam_role.task.arn
}

output "environment" {
  description = "The kvcm configuration (KVCM_* variables, no secrets) the worker gets."
  value       = local.environment
}

output "published_metrics" {
  description = "Worker metrics published to CloudWatch (namespace metrics_namespace, dimensions ClusterName, ServiceName)."
  value       = local.published_metrics
}
