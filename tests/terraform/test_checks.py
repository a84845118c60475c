"""Self-tests of check_terraform.py: the repository passes, and each kind of breakage it promises
to catch is caught (a copy of the files is broken one way at a time)."""
import pathlib
import shutil
import sys

import pytest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import check_terraform  # noqa: E402

ROOT = pathlib.Path(__file__).resolve().parents[2]


def test_repository_passes():
    checked, failures = check_terraform.run_checks(ROOT)
    assert failures == []
    assert checked > 500


@pytest.fixture
def copy(tmp_path):
    shutil.copytree(ROOT / "terraform", tmp_path / "terraform", ignore=shutil.ignore_patterns(".terraform*", "*.tfstate*"))
    (tmp_path / "infra").mkdir()
    for f in ("Dockerfile", "docker-compose.yml"):
        shutil.copy(ROOT / "infra" / f, tmp_path / "infra" / f)
    (tmp_path / "core" / "config").mkdir(parents=True)
    shutil.copy(ROOT / "core" / "config" / "default.toml", tmp_path / "core" / "config" / "default.toml")
    return tmp_path


def edit(root, rel, old, new):
    p = root / rel
    s = p.read_text()
    assert old in s, f"{old!r} not in {rel}"
    p.write_text(s.replace(old, new, 1))


BREAKAGES = {
    "no transit encryption": ("terraform/modules/valkey/main.tf", "transit_encryption_enabled = true", "transit_encryption_enabled = false", "[valkey]"),
    "TLS only preferred": ("terraform/modules/valkey/main.tf", 'transit_encryption_mode    = "required"', 'transit_encryption_mode    = "preferred"', "[valkey]"),
    "no at-rest encryption": ("terraform/modules/valkey/main.tf", "at_rest_encryption_enabled = true", "at_rest_encryption_enabled = false", "[valkey]"),
    "no Multi-AZ": ("terraform/modules/valkey/main.tf", "multi_az_enabled           = true", "multi_az_enabled           = false", "[valkey]"),
    "no failover": ("terraform/modules/valkey/main.tf", "automatic_failover_enabled = true", "automatic_failover_enabled = false", "[valkey]"),
    "literal AUTH token": ("terraform/modules/valkey/main.tf", "auth_token                 = random_password.auth_token.result", 'auth_token                 = "hunter2hunter2hunter2"', "[secrets]"),
    "literal secret value": ("terraform/modules/api/main.tf", "secret_string = random_password.admin.result", 'secret_string = "correct-horse"', "[secrets]"),
    "password in the environment": ("terraform/modules/worker/main.tf", "KVCM_NAMESPACE  = var.namespace", 'KVCM_NAMESPACE  = var.namespace\n      KVCM_VALKEY_PASSWORD = var.valkey_url', "[secrets]"),
    "internet-facing admin ALB": ("terraform/modules/api/main.tf", "internal                   = true", "internal                   = false", "[private]"),
    "admin route on API Gateway": ("terraform/modules/api/lambda.tf", '"GET /api/healthy"]', '"GET /api/healthy", "ANY /{proxy+}"]', "[private]"),
    "API Gateway invokes admin": ("terraform/modules/api/lambda.tf", 'function_name = aws_lambda_function.plane["meta"].function_name\n  principal     = "apigateway.amazonaws.com"',
                                  'function_name = aws_lambda_function.plane["admin"].function_name\n  principal     = "apigateway.amazonaws.com"', "[private]"),
    "Lambda function URL": ("terraform/modules/api/lambda.tf", "# ---- meta plane: API Gateway HTTP API ----",
                            'resource "aws_lambda_function_url" "admin" {\n  function_name      = "x"\n  authorization_type = "NONE"\n}', "[private]"),
    "public IP on tasks": ("terraform/modules/worker/main.tf", "assign_public_ip = false", "assign_public_ip = true", "[private]"),
    "ingress from anywhere": ("terraform/modules/network/main.tf", "cidr_ipv4         = local.vpc_cidr", 'cidr_ipv4         = "0.0.0.0/0"', "[private]"),
    "wildcard action": ("terraform/modules/api/ecs.tf", '"logs:CreateLogStream", "logs:PutLogEvents"]\n    resources = ["${var.ecs_log_group_arn}:*"]',
                        '"logs:CreateLogStream", "logs:PutLogEvents", "s3:*"]\n    resources = ["${var.ecs_log_group_arn}:*"]', "[iam]"),
    "star resource": ("terraform/modules/worker/main.tf", 'resources = ["${var.log_group_arn}:*"]', 'resources = ["*"]', "[iam]"),
    "action the role does not use": ("terraform/modules/worker/main.tf", '"logs:DescribeLogStreams", "logs:PutLogEvents"]', '"logs:DescribeLogStreams", "logs:PutLogEvents", "logs:DeleteLogGroup"]', "[iam]"),
    "managed policy": ("terraform/modules/worker/main.tf", "# ---- task definition and service ----",
                       'resource "aws_iam_role_policy_attachment" "admin" {\n  role       = aws_iam_role.task.name\n  policy_arn = "arn:aws:iam::aws:policy/AdministratorAccess"\n}', "[iam]"),
    "variable without description": ("terraform/modules/worker/variables.tf", '  description = "Fewest worker tasks.', '  # description = "Fewest worker tasks.', "[variables]"),
    "unpinned provider": ("terraform/modules/valkey/versions.tf", 'version = "~> 6.0"', 'version = ">= 6.0"', "[versions]"),
    "meta auth off": ("terraform/modules/api/main.tf", 'KVCM_META_AUTH            = "true"', 'KVCM_META_AUTH            = "false"', "[config]"),
    "unknown config key": ("terraform/modules/api/main.tf", "KVCM_CLIENT_IP_HEADER =", "KVCM_CLIENT_IP_HEADR =", "[config]"),
    "plain redis": ("terraform/modules/valkey/outputs.tf", '"rediss://${', '"redis://${', "[config]"),
    "for_each over unknown ids": ("terraform/modules/valkey/main.tf", "for_each = merge(", "for_each = toset(concat([aws_security_group.clients.id], var.client_security_group_ids))\n  x = merge(", "[plan]"),
    "count on a resource attribute": ("terraform/modules/network/main.tf", "count = var.create_vpc && var.enable_flow_logs ? 1 : 0", "count = aws_vpc.this[0].id != null ? 1 : 0", "[plan]"),
    "root image": ("infra/Dockerfile", "USER 10001:10001", "USER root", "[container]"),
    "no healthcheck": ("infra/Dockerfile", "HEALTHCHECK --interval", "# HEALTHCHECK --interval", "[container]"),
    "password in compose": ("infra/docker-compose.yml", 'KVCM_BOOTSTRAP_ADMIN_USER: "admin"', 'KVCM_BOOTSTRAP_ADMIN_USER: "admin"\n      KVCM_BOOTSTRAP_ADMIN_PASSWORD: "hunter22"', "[container]"),
    "missing module README": ("terraform/modules/valkey/README.md", "# valkey", None, "[layout]"),
}


@pytest.mark.parametrize("case", sorted(BREAKAGES))
def test_breakage_is_caught(copy, case):
    rel, old, new, tag = BREAKAGES[case]
    if new is None:
        (copy / rel).unlink()
    else:
        edit(copy, rel, old, new)
    _, failures = check_terraform.run_checks(copy)
    assert any(f.startswith(tag) for f in failures), f"{case}: expected a {tag} failure, got {failures}"


def test_unparsable_tf_is_caught(copy):
    (copy / "terraform/modules/api/broken.tf").write_text('resource "aws_lb" "x" {\n  internal = \n')
    _, failures = check_terraform.run_checks(copy)
    assert any(f.startswith("[parse]") for f in failures)
