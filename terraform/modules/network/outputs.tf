output "vpc_id" {
  description = "The VPC kvcm runs in."
  value       = local.vpc_id
}

output "vpc_cidr" {
  description = "CIDR block of the VPC."
  value       = local.vpc_cidr
}

output "private_subnet_ids" {
  description = "Private subnets for the kvcm tasks and functions, Valkey and the internal load balancers."
  value       = local.private_subnet_ids
}

output "public_subnet_ids" {
  description = "Public subnets (NAT gateways only; empty when bringing your own VPC)."
  value       = aws_subnet.public[*].id
}

output "nat_public_ips" {
  description = "Public addresses the private subnets reach the internet from (allow-list them where needed)."
  value       = aws_eip.nat[*].public_ip
}
