output "replication_group_id" {
  description = "Id of the ElastiCache replication group."
  value       = aws_elasticache_replication_group.this.id
}

output "configuration_endpoint_address" {
  description = "Configuration endpoint of the cluster (the seed kvcm connects to)."
  value       = aws_elasticache_replication_group.this.configuration_endpoint_address
}

output "port" {
  description = "Valkey port."
  value       = var.port
}

output "valkey_url" {
  description = "kvcm's valkey_url (KVCM_VALKEY_URL): TLS to the configuration endpoint. The AUTH token is not in it: kvcm reads it from KVCM_VALKEY_PASSWORD."
  value       = "rediss://${aws_elasticache_replication_group.this.configuration_endpoint_address}:${var.port}"
}

output "auth_token_secret_arn" {
  description = "Secrets Manager secret holding the AUTH token (KVCM_VALKEY_PASSWORD)."
  value       = aws_secretsmanager_secret.auth_token.arn
}

output "auth_token_version" {
  description = "The AUTH token generation the replication group has applied. Pass it to the api and worker modules (secrets_version): it changes their task definitions and function configurations only after ElastiCache accepts the new token, so a rotation rolls every kvcm process onto it in step."
  value       = var.auth_token_version
  depends_on  = [aws_elasticache_replication_group.this]
}

output "kms_key_arn" {
  description = "KMS key encrypting the data at rest and the AUTH token secret (readers of the secret need kms:Decrypt on it)."
  value       = aws_kms_key.this.arn
}

output "client_security_group_id" {
  description = "Security group to attach to everything that connects to Valkey (kvcm tasks and functions)."
  value       = aws_security_group.clients.id
}

output "node_ids" {
  description = "Cache cluster (node) ids, <id>-<shard>-<node>: the CacheClusterId dimension of the ElastiCache metrics."
  value       = local.node_ids
}
