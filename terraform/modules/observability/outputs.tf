output "log_group_names" {
  description = "Log group names by role: api, worker, worker_metrics, lambda_meta, lambda_admin, apigw_access, valkey_slow_log, valkey_engine, vpc_flow_logs."
  value       = { for k, g in aws_cloudwatch_log_group.this : k => g.name }
}

output "log_group_arns" {
  description = "Log group ARNs by role (same keys as log_group_names)."
  value       = { for k, g in aws_cloudwatch_log_group.this : k => g.arn }
}

output "kms_key_arn" {
  description = "KMS key encrypting the log groups and the alarm topic."
  value       = aws_kms_key.this.arn
}

output "alarm_topic_arn" {
  description = "SNS topic every alarm notifies (subscribe paging, chat, e-mail)."
  value       = aws_sns_topic.alarms.arn
}

output "dashboard_name" {
  description = "CloudWatch dashboard of the deployment."
  value       = aws_cloudwatch_dashboard.this.dashboard_name
}
