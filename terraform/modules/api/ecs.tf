# runtime = "ecs": kvcm-api as a Fargate service serving both planes, the meta plane behind an
# internal ALB, the admin plane behind the internal admin ALB (main.tf).

locals {
  ecs = var.runtime == "ecs" ? 1 : 0
}

resource "aws_security_group" "meta_alb" {
  count       = local.ecs
  name        = "${var.name}-meta-alb"
  description = "Internal ALB of the kvcm meta plane: HTTPS from the engines' networks"
  vpc_id      = var.vpc_id
  tags        = merge(var.tags, { Name = "${var.name}-meta-alb" })
}

resource "aws_vpc_security_group_ingress_rule" "meta_alb_https" {
  for_each = var.runtime == "ecs" ? toset(var.meta_ingress_cidrs) : toset([])

  security_group_id = aws_security_group.meta_alb[0].id
  description       = "HTTPS from an engine network"
  ip_protocol       = "tcp"
  from_port         = 443
  to_port           = 443
  cidr_ipv4         = each.value
}

resource "aws_vpc_security_group_egress_rule" "meta_alb_to_tasks" {
  count                        = local.ecs
  security_group_id            = aws_security_group.meta_alb[0].id
  description                  = "Meta plane of the kvcm-api tasks"
  ip_protocol                  = "tcp"
  from_port                    = local.meta_port
  to_port                      = local.meta_port
  referenced_security_group_id = aws_security_group.tasks[0].id
}

resource "aws_vpc_security_group_egress_rule" "admin_alb_to_tasks" {
  count                        = local.ecs
  security_group_id            = aws_security_group.admin_alb.id
  description                  = "Admin plane of the kvcm-api tasks"
  ip_protocol                  = "tcp"
  from_port                    = local.admin_port
  to_port                      = local.admin_port
  referenced_security_group_id = aws_security_group.tasks[0].id
}

resource "aws_security_group" "tasks" {
  count       = local.ecs
  name        = "${var.name}-api-tasks"
  description = "kvcm-api tasks: meta plane from the meta ALB, admin plane from the admin ALB"
  vpc_id      = var.vpc_id
  tags        = merge(var.tags, { Name = "${var.name}-api-tasks" })
}

resource "aws_vpc_security_group_ingress_rule" "tasks_meta" {
  count                        = local.ecs
  security_group_id            = aws_security_group.tasks[0].id
  description                  = "Meta plane from the meta ALB"
  ip_protocol                  = "tcp"
  from_port                    = local.meta_port
  to_port                      = local.meta_port
  referenced_security_group_id = aws_security_group.meta_alb[0].id
}

resource "aws_vpc_security_group_ingress_rule" "tasks_admin" {
  count                        = local.ecs
  security_group_id            = aws_security_group.tasks[0].id
  description                  = "Admin plane from the admin ALB"
  ip_protocol                  = "tcp"
  from_port                    = local.admin_port
  to_port                      = local.admin_port
  referenced_security_group_id = aws_security_group.admin_alb.id
}

resource "aws_vpc_security_group_egress_rule" "tasks_https" {
  count             = local.ecs
  security_group_id = aws_security_group.tasks[0].id
  description       = "HTTPS to AWS APIs (ECR, Secrets Manager, CloudWatch Logs) through the VPC endpoints or NAT"
  ip_protocol       = "tcp"
  from_port         = 443
  to_port           = 443
  cidr_ipv4         = "0.0.0.0/0"
}

resource "aws_lb" "meta" {
  #checkov:skip=CKV_AWS_91:Access logs are optional (alb_access_logs_bucket): the bucket and its ELB delivery policy are the operator's.
  #checkov:skip=CKV2_AWS_28:No WAF on an internal ALB reachable only from meta_ingress_cidrs; kvcm authenticates every meta request (meta_auth) and bounds every request.
  count                      = local.ecs
  name                       = "${var.name}-meta"
  internal                   = true
  load_balancer_type         = "application"
  subnets                    = var.subnet_ids
  security_groups            = [aws_security_group.meta_alb[0].id]
  idle_timeout               = var.alb_idle_timeout
  drop_invalid_header_fields = true
  enable_deletion_protection = var.deletion_protection

  dynamic "access_logs" {
    for_each = var.alb_access_logs_bucket == null ? [] : [var.alb_access_logs_bucket]
    content {
      bucket  = access_logs.value
      prefix  = "${var.name}/meta"
      enabled = true
    }
  }

  tags = var.tags
}

resource "aws_lb_target_group" "meta" {
  count                = local.ecs
  name                 = "${var.name}-meta"
  port                 = local.meta_port
  protocol             = "HTTP"
  target_type          = "ip"
  vpc_id               = var.vpc_id
  deregistration_delay = 30

  health_check {
    path                = "/api/healthy"
    matcher             = "200"
    interval            = 10
    timeout             = 5
    healthy_threshold   = 2
    unhealthy_threshold = 3
  }

  tags = var.tags
}

resource "aws_lb_listener" "meta" {
  count             = local.ecs
  load_balancer_arn = aws_lb.meta[0].arn
  port              = 443
  protocol          = "HTTPS"
  ssl_policy        = var.ssl_policy
  certificate_arn   = var.certificate_arn

  default_action {
    type             = "forward"
    target_group_arn = aws_lb_target_group.meta[0].arn
  }

  tags = var.tags
}

resource "aws_lb_target_group" "admin_ecs" {
  count                = local.ecs
  name                 = "${var.name}-admin"
  port                 = local.admin_port
  protocol             = "HTTP"
  target_type          = "ip"
  vpc_id               = var.vpc_id
  deregistration_delay = 30

  health_check {
    path                = "/api/healthy"
    matcher             = "200"
    interval            = 15
    timeout             = 5
    healthy_threshold   = 2
    unhealthy_threshold = 3
  }

  tags = var.tags
}

# ---- IAM: the task execution role pulls the image, writes logs, reads the two secrets ----
# kvcm-api itself calls no AWS API, so the tasks get no task role at all.

data "aws_iam_policy_document" "ecs_tasks_assume" {
  statement {
    actions = ["sts:AssumeRole"]
    principals {
      type        = "Service"
      identifiers = ["ecs-tasks.amazonaws.com"]
    }
    condition {
      test     = "StringEquals"
      variable = "aws:SourceAccount"
      values   = [local.account]
    }
  }
}

resource "aws_iam_role" "execution" {
  count              = local.ecs
  name               = "${var.name}-api-execution"
  description        = "ECS task execution role of kvcm-api: image pull, logs, its two secrets"
  assume_role_policy = data.aws_iam_policy_document.ecs_tasks_assume.json
  tags               = var.tags
}

data "aws_iam_policy_document" "execution" {
  statement {
    sid       = "EcrAuthToken"
    actions   = ["ecr:GetAuthorizationToken"] # has no resource-level permissions
    resources = ["*"]
  }
  statement {
    sid       = "PullTheKvcmImage"
    actions   = ["ecr:BatchCheckLayerAvailability", "ecr:BatchGetImage", "ecr:GetDownloadUrlForLayer"]
    resources = [var.ecr_repository_arn]
  }
  statement {
    sid       = "WriteItsLogs"
    actions   = ["logs:CreateLogStream", "logs:PutLogEvents"]
    resources = ["${var.ecs_log_group_arn}:*"]
  }
  statement {
    sid       = "ReadItsSecrets"
    actions   = ["secretsmanager:GetSecretValue"]
    resources = values(local.secrets)
  }
  statement {
    sid       = "DecryptItsSecrets"
    actions   = ["kms:Decrypt"]
    resources = local.secret_kms_key_arns
    condition {
      test     = "StringEquals"
      variable = "kms:ViaService"
      values   = ["secretsmanager.${local.region}.amazonaws.com"]
    }
  }
}

resource "aws_iam_role_policy" "execution" {
  count  = local.ecs
  name   = "kvcm-api-execution"
  role   = aws_iam_role.execution[0].id
  policy = data.aws_iam_policy_document.execution.json
}

# ---- task definition and service ----

resource "aws_ecs_task_definition" "this" {
  count                    = local.ecs
  family                   = "${var.name}-api"
  requires_compatibilities = ["FARGATE"]
  network_mode             = "awsvpc"
  cpu                      = var.cpu
  memory                   = var.memory
  execution_role_arn       = aws_iam_role.execution[0].arn

  runtime_platform {
    operating_system_family = "LINUX"
    cpu_architecture        = var.architecture
  }

  container_definitions = jsonencode([
    {
      name                   = "kvcm-api"
      image                  = var.image
      essential              = true
      command                = ["kvcm-api"]
      user                   = "10001:10001"
      readonlyRootFilesystem = true
      privileged             = false
      portMappings = [
        { name = "meta", containerPort = local.meta_port, protocol = "tcp" },
        { name = "admin", containerPort = local.admin_port, protocol = "tcp" },
      ]
      environment = [for k in sort(keys(local.ecs_environment)) : { name = k, value = local.ecs_environment[k] }]
      secrets     = [for k in sort(keys(local.secrets)) : { name = k, valueFrom = local.secrets[k] }]
      # kvcm keeps up to 2 x max_connections (4096) sockets open.
      ulimits         = [{ name = "nofile", softLimit = 16384, hardLimit = 16384 }]
      linuxParameters = { capabilities = { drop = ["ALL"] } }
      # On SIGTERM kvcm drains in-flight requests for request_timeout_ms (10 s), then lets read
      # hints finish and writes what is queued (event log, hit counts), each step within
      # valkey_timeout_ms (2 s): 20 s covers both.
      stopTimeout = 20
      healthCheck = {
        command     = ["CMD", "/usr/local/bin/kvcm-healthcheck"]
        interval    = 10
        timeout     = 3
        retries     = 3
        startPeriod = 15
      }
      logConfiguration = {
        logDriver = "awslogs"
        options = {
          awslogs-group         = var.ecs_log_group_name
          awslogs-region        = local.region
          awslogs-stream-prefix = "api"
        }
      }
    }
  ])

  tags = var.tags
}

resource "aws_ecs_service" "this" {
  count            = local.ecs
  name             = "${var.name}-api"
  cluster          = var.ecs_cluster_arn
  task_definition  = aws_ecs_task_definition.this[0].arn
  desired_count    = var.desired_count
  launch_type      = "FARGATE"
  platform_version = "LATEST"
  propagate_tags   = "SERVICE"

  health_check_grace_period_seconds  = 30
  deployment_minimum_healthy_percent = 100
  deployment_maximum_percent         = 200

  deployment_circuit_breaker {
    enable   = true
    rollback = true
  }

  network_configuration {
    subnets          = var.subnet_ids
    security_groups  = [aws_security_group.tasks[0].id, var.valkey_client_security_group_id]
    assign_public_ip = false
  }

  load_balancer {
    target_group_arn = aws_lb_target_group.meta[0].arn
    container_name   = "kvcm-api"
    container_port   = local.meta_port
  }

  load_balancer {
    target_group_arn = aws_lb_target_group.admin_ecs[0].arn
    container_name   = "kvcm-api"
    container_port   = local.admin_port
  }

  lifecycle {
    ignore_changes = [desired_count] # owned by autoscaling
    precondition {
      condition     = var.ecs_cluster_arn != null && length(var.meta_ingress_cidrs) > 0
      error_message = "runtime = \"ecs\" needs ecs_cluster_arn and meta_ingress_cidrs."
    }
  }

  depends_on = [aws_lb_listener.meta, aws_lb_listener.admin, aws_iam_role_policy.execution]

  tags = var.tags
}

resource "aws_appautoscaling_target" "this" {
  count              = local.ecs
  service_namespace  = "ecs"
  scalable_dimension = "ecs:service:DesiredCount"
  resource_id        = "service/${element(split("/", var.ecs_cluster_arn), length(split("/", var.ecs_cluster_arn)) - 1)}/${aws_ecs_service.this[0].name}"
  min_capacity       = var.min_capacity
  max_capacity       = var.max_capacity
}

resource "aws_appautoscaling_policy" "cpu" {
  count              = local.ecs
  name               = "${var.name}-api-cpu"
  policy_type        = "TargetTrackingScaling"
  service_namespace  = aws_appautoscaling_target.this[0].service_namespace
  scalable_dimension = aws_appautoscaling_target.this[0].scalable_dimension
  resource_id        = aws_appautoscaling_target.this[0].resource_id

  target_tracking_scaling_policy_configuration {
    target_value       = var.cpu_target_percent
    scale_in_cooldown  = 300
    scale_out_cooldown = 60
    predefined_metric_specification {
      predefined_metric_type = "ECSServiceAverageCPUUtilization"
    }
  }
}
