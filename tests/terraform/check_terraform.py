#!/usr/bin/env python3
"""Static checks of kvcm's deployment files, run by `make terraform-check` (and so `make test`).

No terraform binary is needed: every .tf under terraform/ is parsed with python-hcl2 and the
parsed HCL is checked for what the production stack promises (see terraform/README.md):

  layout       every module has main/variables/outputs/versions.tf and a README.md; examples/complete
  variables    every variable has a type and a description; every output a description
  versions     required_version and every used provider pinned with "~>" in each module/example
  secrets      no password/token/secret attribute or variable default is a string literal; the
               AUTH token and the admin password come from random_password into Secrets Manager;
               no secret name in a container/function environment (ECS `secrets` / SECRET_ARNS)
  valkey       the replication group: engine valkey, cluster mode, TLS required, at-rest KMS,
               automatic failover + Multi-AZ, >= 1 replica, AUTH token from random_password
  private      the admin plane is never public: every load balancer internal, no Lambda URL, API
               Gateway integrates the meta function only with meta routes only, admin listeners
               on the internal admin ALB, no 0.0.0.0/0 ingress, no public IPs on tasks
  iam          policies only in aws_iam_policy_document, no "*" / "svc:*" action, "*" resource
               only for actions without resource-level permissions (or in KMS key policies), and
               each document grants exactly the actions its role uses (EXPECTED_ACTIONS)
  config       every KVCM_* variable set in Terraform or compose is a key of
               core/config/default.toml; the production values (meta_auth, client_ip_header,
               rediss://, bootstrap admin) are set
  plan         no count, and no for_each set, depends on a resource's attributes (unknown until
               apply: `terraform plan` would refuse); a for_each map may carry them as values
  container    Dockerfile: multi-stage, non-root USER, HEALTHCHECK, EXPOSE, no secret ENV/ARG;
               compose: a 3-primary Valkey cluster + init job, the admin password as a secret

Exit status 1 with one line per failure. `run_checks(root)` is what the tests call.
"""
from __future__ import annotations

import pathlib
import re
import sys
import tomllib

import hcl2
import yaml

# ---- what the checks compare against ----

# Environment variables kvcm reads that are not keys of core/config/default.toml.
EXTRA_KVCM_ENV = {
    "KVCM_BOOTSTRAP_ADMIN_PASSWORD",  # core/src/config.rs BOOTSTRAP_PASSWORD_ENV
    "KVCM_VALKEY_PASSWORD",  # core/src/config.rs VALKEY_PASSWORD_ENV
}

# Actions that have no resource-level permissions (or that Lambda checks unscoped), the only ones
# an identity policy may grant on "*".
STAR_RESOURCE_OK = {
    "ecr:GetAuthorizationToken",
    "ec2:CreateNetworkInterface",
    "ec2:DescribeNetworkInterfaces",
    "ec2:DescribeSubnets",
    "xray:PutTelemetryRecords",
    "xray:PutTraceSegments",
}

KMS_KEY_POLICY_ACTIONS = {
    "kms:CancelKeyDeletion", "kms:CreateAlias", "kms:DeleteAlias", "kms:DescribeKey", "kms:DisableKey",
    "kms:DisableKeyRotation", "kms:EnableKey", "kms:EnableKeyRotation", "kms:GetKeyPolicy",
    "kms:GetKeyRotationStatus", "kms:ListAliases", "kms:ListGrants", "kms:ListKeyPolicies",
    "kms:ListResourceTags", "kms:PutKeyPolicy", "kms:RevokeGrant", "kms:RotateKeyOnDemand",
    "kms:ScheduleKeyDeletion", "kms:TagResource", "kms:UntagResource", "kms:UpdateAlias",
    "kms:UpdateKeyDescription", "kms:CreateGrant", "kms:Decrypt", "kms:Encrypt", "kms:GenerateDataKey",
    "kms:GenerateDataKeyWithoutPlaintext", "kms:ReEncryptFrom", "kms:ReEncryptTo",
}

ECR_PULL = {"ecr:GetAuthorizationToken", "ecr:BatchCheckLayerAvailability", "ecr:BatchGetImage", "ecr:GetDownloadUrlForLayer"}

# (directory under terraform/, policy document name) -> exactly the actions it grants.
EXPECTED_ACTIONS = {
    ("modules/api", "execution"): ECR_PULL | {"logs:CreateLogStream", "logs:PutLogEvents", "secretsmanager:GetSecretValue", "kms:Decrypt"},
    ("modules/api", "lambda"): {
        "logs:CreateLogStream", "logs:PutLogEvents",
        "ec2:CreateNetworkInterface", "ec2:DescribeNetworkInterfaces", "ec2:DescribeSubnets",
        "ec2:AssignPrivateIpAddresses", "ec2:DeleteNetworkInterface", "ec2:UnassignPrivateIpAddresses",
        "xray:PutTelemetryRecords", "xray:PutTraceSegments",
        "secretsmanager:GetSecretValue", "kms:Decrypt",
    },
    ("modules/api", "ecs_tasks_assume"): {"sts:AssumeRole"},
    ("modules/api", "lambda_assume"): {"sts:AssumeRole"},
    ("modules/worker", "execution"): ECR_PULL | {"logs:CreateLogStream", "logs:PutLogEvents", "secretsmanager:GetSecretValue", "kms:Decrypt"},
    ("modules/worker", "task"): {"logs:CreateLogStream", "logs:DescribeLogStreams", "logs:PutLogEvents",
                                 "elasticfilesystem:ClientMount", "elasticfilesystem:ClientWrite"},
    ("modules/worker", "ecs_tasks_assume"): {"sts:AssumeRole"},
    ("modules/network", "flow_logs"): {"logs:CreateLogStream", "logs:PutLogEvents", "logs:DescribeLogStreams"},
    ("modules/network", "flow_logs_assume"): {"sts:AssumeRole"},
    ("modules/observability", "alarms_topic"): {"sns:Publish"},
    ("examples/complete", "ecr_lambda_pull"): {"ecr:BatchGetImage", "ecr:GetDownloadUrlForLayer"},
}

SECRET_NAME = re.compile(r"(password|passwd|secret|token)", re.I)
# Attribute names that mention a secret but hold a reference to one, never its value.
SECRET_NAME_OK = re.compile(r"(_arns?|_ids?|_version|_update_strategy|_name|kms_key_id|secret_id|_enabled)$", re.I)
META_ROUTES = {"POST /api/{rpc}", "GET /api/healthy"}


# ---- HCL helpers (python-hcl2 keeps the quotes of string literals: '"valkey"') ----

def is_literal(v) -> bool:
    return isinstance(v, str) and len(v) >= 2 and v.startswith('"') and v.endswith('"') and "${" not in v


def unq(v):
    if isinstance(v, str) and len(v) >= 2 and v.startswith('"') and v.endswith('"'):
        return v[1:-1]
    if isinstance(v, str) and v.startswith("${") and v.endswith("}"):
        return v[2:-1]
    return v


def blocks(doc: dict, kind: str):
    """(type, name, body) of resources/data, (name, body) of variables/outputs/modules."""
    for entry in doc.get(kind, []):
        for k1, v1 in entry.items():
            if kind in ("resource", "data"):
                for k2, body in v1.items():
                    yield unq(k1), unq(k2), body
            else:
                yield unq(k1), v1


def walk(node, path=()):
    """Every (key path, value) under a parsed body."""
    if isinstance(node, dict):
        for k, v in node.items():
            if k.startswith("__"):
                continue
            yield path + (unq(k),), v
            yield from walk(v, path + (unq(k),))
    elif isinstance(node, list):
        for item in node:
            yield from walk(item, path)


def text(v) -> str:
    return str(v)


def strings(v) -> list[str]:
    """The string literals of a list attribute, or of an expression (e.g. a conditional list)."""
    if isinstance(v, list):
        out = []
        for x in v:
            out.extend(strings(x) if not is_literal(x) and isinstance(x, str) and x.startswith("${") else [unq(x)])
        return out
    if isinstance(v, str):
        return [m for m in re.findall(r'"([^"]*)"', v)] if v.startswith("${") else [unq(v)]
    return []


def statements(doc_body: dict) -> list[dict]:
    """statement blocks of a policy document, dynamic ones included (their content)."""
    out = list(doc_body.get("statement", []))
    for dyn in doc_body.get("dynamic", []):
        for name, d in dyn.items():
            if unq(name) == "statement":
                for item in d if isinstance(d, list) else [d]:
                    out.extend(item.get("content", []))
    return out


# Parsed files by content (the self-tests check many copies that differ in one file).
_PARSED: dict[str, dict] = {}


class Repo:
    def __init__(self, root: pathlib.Path):
        self.root = root
        self.tf_root = root / "terraform"
        self.failures: list[str] = []
        self.checked = 0
        self.docs: dict[pathlib.Path, dict] = {}
        for path in sorted(self.tf_root.rglob("*.tf")):
            if ".terraform" in path.parts:
                continue
            source = path.read_text()
            try:
                if source not in _PARSED:
                    _PARSED[source] = hcl2.loads(source)
                self.docs[path] = _PARSED[source]
            except Exception as e:  # noqa: BLE001 - any parse error is a failure
                self.fail("parse", path, f"does not parse: {e}")

    def fail(self, check: str, where, msg: str):
        where = where.relative_to(self.root) if isinstance(where, pathlib.Path) else where
        self.failures.append(f"[{check}] {where}: {msg}")

    def ok(self, cond: bool, check: str, where, msg: str):
        self.checked += 1
        if not cond:
            self.fail(check, where, msg)

    def dirs(self):
        return sorted({p.parent for p in self.docs})

    def dir_key(self, d: pathlib.Path) -> str:
        return d.relative_to(self.tf_root).as_posix()

    def in_dir(self, d):
        return [(p, doc) for p, doc in self.docs.items() if p.parent == d]

    def all(self, kind):
        for p, doc in self.docs.items():
            for b in blocks(doc, kind):
                yield (p,) + b


# ---- the checks ----

def check_layout(r: Repo):
    modules = sorted(p for p in (r.tf_root / "modules").iterdir() if p.is_dir()) if (r.tf_root / "modules").is_dir() else []
    r.ok(len(modules) >= 5, "layout", r.tf_root, "expected the network, valkey, api, worker and observability modules")
    for m in modules + [r.tf_root / "examples" / "complete"]:
        for f in ("main.tf", "variables.tf", "outputs.tf", "versions.tf", "README.md"):
            r.ok((m / f).is_file(), "layout", m, f"missing {f}")
    r.ok((r.tf_root / "README.md").is_file(), "layout", r.tf_root, "missing README.md")


def check_variables(r: Repo):
    for p, name, body in r.all("variable"):
        r.ok("type" in body, "variables", p, f"variable {name} has no type")
        r.ok(bool(unq(body.get("description", '""')).strip()), "variables", p, f"variable {name} has no description")
    for p, name, body in r.all("output"):
        r.ok(bool(unq(body.get("description", '""')).strip()), "variables", p, f"output {name} has no description")


def check_versions(r: Repo):
    for d in r.dirs():
        tf_blocks = [b for p, doc in r.in_dir(d) for b in doc.get("terraform", [])]
        r.ok(len(tf_blocks) == 1, "versions", d, "needs exactly one terraform {} block (versions.tf)")
        if not tf_blocks:
            continue
        tb = tf_blocks[0]
        rv = unq(tb.get("required_version", ""))
        r.ok(bool(re.search(r">=\s*1\.\d+", rv or "")), "versions", d, "required_version must set a lower bound (>= 1.x)")
        providers = {}
        for rp in tb.get("required_providers", []):
            for k, v in rp.items():
                if not k.startswith("__"):
                    providers[unq(k)] = v
        for pname, spec in providers.items():
            r.ok(isinstance(spec, dict) and unq(spec.get("source", "")).startswith("hashicorp/"), "versions", d, f"provider {pname} needs a source")
            r.ok(isinstance(spec, dict) and unq(spec.get("version", "")).startswith("~>"), "versions", d, f"provider {pname} must be pinned with ~>")
        used = set()
        for p, doc in r.in_dir(d):
            for kind in ("resource", "data"):
                for t, _, _ in blocks(doc, kind):
                    used.add(t.split("_", 1)[0])
        for u in used:
            r.ok(u in providers, "versions", d, f"provider {u} is used but not in required_providers")


def check_secrets(r: Repo):
    for p, doc in r.docs.items():
        for kind in ("resource", "data", "module", "locals", "output"):
            for entry in doc.get(kind, []):
                for path, v in walk(entry):
                    key = path[-1]
                    if SECRET_NAME.search(key) and not SECRET_NAME_OK.search(key) and is_literal(v) and unq(v) != "":
                        r.fail("secrets", p, f"{'.'.join(path)} is a string literal: secrets come from random_password / Secrets Manager")
                    r.checked += 1
        for name, body in blocks(doc, "variable"):
            if SECRET_NAME.search(name) and not SECRET_NAME_OK.search(name):
                default = body.get("default")
                r.ok(default in (None, '""', "${null}") , "secrets", p, f"variable {name} must not have a default value")
    # Secrets Manager secret values are generated, never given.
    for p, t, n, body in r.all("resource"):
        if t == "aws_secretsmanager_secret_version":
            r.ok("random_password." in text(body.get("secret_string", "")), "secrets", p, f"{t}.{n} must store a random_password result")
    # Environment of tasks and functions: secret names never carry values there.
    for p, doc in r.docs.items():
        for loc in doc.get("locals", []):
            env = loc.get("environment")
            if isinstance(env, str) and env.startswith("${merge("):
                env_text = env
            elif isinstance(env, dict):
                env_text = text(env)
            else:
                continue
            for bad in re.findall(r"KVCM_[A-Z0-9_]*(?:PASSWORD|TOKEN|SECRET)[A-Z0-9_]*", env_text):
                if not bad.endswith("_FILE"):
                    r.fail("secrets", p, f"{bad} in locals.environment: pass it as a secret")
        for t, n, body in blocks(doc, "resource"):
            if t == "aws_lambda_function":
                env = text(body.get("environment", ""))
                for bad in re.findall(r"KVCM_[A-Z0-9_]*(?:PASSWORD|TOKEN)[A-Z0-9_]*\s*=", env.replace('"', "")):
                    r.fail("secrets", p, f"{t}.{n} environment sets {bad.rstrip('= ')}: only SECRET_ARNS (ARNs) may name secrets")
                r.checked += 1


def check_valkey(r: Repo):
    groups = [(p, n, b) for p, t, n, b in r.all("resource") if t == "aws_elasticache_replication_group"]
    r.ok(len(groups) == 1, "valkey", r.tf_root, "expected exactly one aws_elasticache_replication_group")
    for p, n, b in groups:
        where = f"{p.relative_to(r.root)} aws_elasticache_replication_group.{n}"
        expect = {
            "engine": '"valkey"', "cluster_mode": '"enabled"', "transit_encryption_enabled": True,
            "transit_encryption_mode": '"required"', "at_rest_encryption_enabled": True,
            "automatic_failover_enabled": True, "multi_az_enabled": True,
        }
        for k, v in expect.items():
            r.ok(b.get(k) == v, "valkey", where, f"{k} must be {unq(v) if isinstance(v, str) else str(v).lower()}, is {b.get(k)!r}")
        r.ok("aws_kms_key." in text(b.get("kms_key_id", "")), "valkey", where, "kms_key_id must be a KMS key of the stack")
        token = text(b.get("auth_token", ""))
        m = re.search(r"random_password\.([A-Za-z0-9_]+)\.result", token)
        r.ok(bool(m), "valkey", where, "auth_token must come from random_password")
        if m:
            versions = [vb for vp, vt, vn, vb in r.all("resource") if vt == "aws_secretsmanager_secret_version" and vp.parent == p.parent]
            r.ok(any(f"random_password.{m.group(1)}.result" in text(vb.get("secret_string", "")) for vb in versions),
                 "valkey", where, "the AUTH token must be stored in Secrets Manager")
        for k in ("num_node_groups", "replicas_per_node_group"):
            r.ok(text(b.get(k, "")).startswith("${var."), "valkey", where, f"{k} must be a variable")
        variables = {n: vb for vp, n, vb in r.all("variable") if vp.parent == p.parent}
        rep = text(variables.get("replicas_per_node_group", {}).get("validation", ""))
        r.ok(">= 1" in rep, "valkey", where, "replicas_per_node_group must be validated >= 1 (failover needs a replica)")
    pgs = [b for p, t, n, b in r.all("resource") if t == "aws_elasticache_parameter_group"]
    r.ok(any("cluster-enabled" in text(b) and '"yes"' in text(b) for b in pgs), "valkey", r.tf_root, "the parameter group must set cluster-enabled yes")


def check_private(r: Repo):
    for p, t, n, b in r.all("resource"):
        where = f"{p.relative_to(r.root)} {t}.{n}"
        if t in ("aws_lb", "aws_alb"):
            r.ok(b.get("internal") is True, "private", where, "every load balancer must be internal")
        if t == "aws_lambda_function_url":
            r.fail("private", where, "no Lambda function URLs (the admin plane is private, the meta plane behind API Gateway)")
        if t == "aws_lambda_permission" and "apigateway" in text(b.get("principal", "")):
            r.ok('["meta"]' in text(b.get("function_name", "")), "private", where, "API Gateway may invoke the meta function only")
        if t == "aws_apigatewayv2_integration":
            r.ok('["meta"]' in text(b.get("integration_uri", "")), "private", where, "API Gateway integrates the meta function only")
        if t == "aws_apigatewayv2_route":
            keys = set(re.findall(r'"((?:GET|POST|PUT|DELETE|PATCH|ANY|HEAD|OPTIONS) [^"]*|\$default)"', text(b.get("for_each", "")) + text(b.get("route_key", ""))))
            r.ok(bool(keys) and keys <= META_ROUTES, "private", where, f"routes must be the meta plane's only ({sorted(META_ROUTES)}), got {sorted(keys)}")
        if t == "aws_lb_listener":
            tg = text(b.get("default_action", ""))
            if "admin" in tg:
                r.ok("aws_lb.admin." in text(b.get("load_balancer_arn", "")), "private", where, "the admin plane's target groups are served by the internal admin ALB only")
        if t == "aws_ecs_service":
            nc = b.get("network_configuration", [{}])[0]
            r.ok(nc.get("assign_public_ip") is False, "private", where, "tasks get no public IP")
        if t == "aws_lambda_function":
            r.ok("vpc_config" in b, "private", where, "functions run in the VPC (Valkey is only reachable there)")
        if t in ("aws_vpc_security_group_ingress_rule", "aws_security_group_rule", "aws_security_group"):
            r.ok("0.0.0.0/0" not in text(b.get("cidr_ipv4", "")) and "0.0.0.0/0" not in text(b.get("ingress", "")) and
                 not (t == "aws_security_group_rule" and "ingress" in text(b.get("type", "")) and "0.0.0.0/0" in text(b)),
                 "private", where, "no ingress from 0.0.0.0/0")
        if t == "aws_vpc_security_group_ingress_rule" and "admin_alb" in text(b.get("security_group_id", "")):
            r.ok("var.admin_ingress_cidrs" in text(b.get("for_each", "")), "private", where, "admin ALB ingress only from var.admin_ingress_cidrs")
    for p, n, b in r.all("variable"):
        if n == "admin_ingress_cidrs":
            r.ok(">= 8" in text(b.get("validation", "")), "private", p, "admin_ingress_cidrs must be validated (no /0)")
    for p, n, b in r.all("module"):
        if unq(b.get("source", "")).endswith("modules/api"):
            r.ok("private_subnet_ids" in text(b.get("subnet_ids", "")), "private", p, f"module {n}: the api module must get private subnets")


def check_iam(r: Repo):
    for p, t, n, b in r.all("resource"):
        where = f"{p.relative_to(r.root)} {t}.{n}"
        if t in ("aws_iam_role_policy", "aws_iam_policy"):
            r.ok(text(b.get("policy", "")).startswith("${data.aws_iam_policy_document."), "iam", where, "policies must be aws_iam_policy_document data sources (checked here)")
        if t in ("aws_iam_role_policy_attachment", "aws_iam_policy_attachment", "aws_iam_user_policy", "aws_iam_group_policy"):
            r.fail("iam", where, "no policy attachments (managed policies grant more than kvcm uses)")
        if t == "aws_iam_role":
            r.ok("managed_policy_arns" not in b and "inline_policy" not in b, "iam", where, "roles get inline policies from policy documents only")
    seen = set()
    for p, t, n, b in r.all("data"):
        if t != "aws_iam_policy_document":
            continue
        key = (r.dir_key(p.parent), n)
        where = f"{p.relative_to(r.root)} data.aws_iam_policy_document.{n}"
        key_policy = n.endswith("key_policy")
        granted = set()
        for st in statements(b):
            r.ok("not_actions" not in st and "not_resources" not in st, "iam", where, "no not_actions / not_resources")
            r.ok(unq(st.get("effect", '"Allow"')) in ("Allow", "Deny"), "iam", where, "effect must be Allow or Deny")
            actions = strings(st.get("actions", []))
            r.ok(bool(actions), "iam", where, "every statement names its actions")
            for a in actions:
                r.ok(a != "*" and not a.endswith(":*"), "iam", where, f"action {a} is a wildcard")
            granted.update(actions)
            resources = strings(st.get("resources", []))
            if "*" in resources and not key_policy:
                bad = sorted(set(actions) - STAR_RESOURCE_OK)
                r.ok(not bad, "iam", where, f'"*" resource for {bad}: name the real ARNs')
            if "secretsmanager:GetSecretValue" in actions:
                r.ok("*" not in resources, "iam", where, "secrets are read by ARN")
        if key_policy:
            r.ok(granted <= KMS_KEY_POLICY_ACTIONS, "iam", where, f"key policy grants unexpected actions {sorted(granted - KMS_KEY_POLICY_ACTIONS)}")
            r.ok("kms:*" not in granted, "iam", where, "no kms:*")
            continue
        seen.add(key)
        expected = EXPECTED_ACTIONS.get(key)
        r.ok(expected is not None, "iam", where, f"policy document {key} is not in EXPECTED_ACTIONS of this check: add the actions its role uses")
        if expected is not None:
            r.ok(granted == expected, "iam", where,
                 f"grants {sorted(granted - expected)} beyond what its role uses / lacks {sorted(expected - granted)}")
    for key in sorted(set(EXPECTED_ACTIONS) - seen):
        r.fail("iam", key[0], f"expected policy document {key[1]} not found")


RESOURCE_REF = re.compile(r"\b(?:aws|random)_[a-z0-9_]+\.[A-Za-z0-9_-]+(?:\[[^\]]*\])?\.[a-z_]+")


def check_plan(r: Repo):
    for p, doc in r.docs.items():
        for kind in ("resource", "data"):
            for t, n, b in blocks(doc, kind):
                where = f"{p.relative_to(r.root)} {t}.{n}"
                count, fe = text(b.get("count", "")), text(b.get("for_each", ""))
                r.ok(not RESOURCE_REF.search(count) and "module." not in count, "plan", where,
                     f"count depends on a resource attribute, unknown until apply: {count}")
                set_like = "toset(" in fe or fe.startswith("${[") or fe.startswith("[")
                r.ok(not (set_like and (RESOURCE_REF.search(fe) or "module." in fe)), "plan", where,
                     f"for_each over a set of resource attributes (unknown until apply): use a map with static keys: {fe}")


def valid_env_names(root: pathlib.Path) -> set[str]:
    cfg = tomllib.loads((root / "core" / "config" / "default.toml").read_text())
    names = set(EXTRA_KVCM_ENV)
    for k, v in cfg.items():
        if isinstance(v, dict):
            names.update(f"KVCM_{k.upper()}__{k2.upper()}" for k2 in v)
        else:
            names.add(f"KVCM_{k.upper()}")
    return names


def env_of_locals(r: Repo, module: str) -> tuple[pathlib.Path | None, str, dict]:
    for p, doc in r.docs.items():
        if r.dir_key(p.parent) != module:
            continue
        for loc in doc.get("locals", []):
            if "environment" in loc:
                env = loc["environment"]
                if isinstance(env, dict):
                    return p, text(env), env
                return p, text(env), {}
    return None, "", {}


def check_config(r: Repo):
    valid = valid_env_names(r.root)
    used: list[tuple[object, str]] = []
    for p, doc in r.docs.items():
        raw = p.read_text()
        for name in re.findall(r"\b(KVCM_[A-Z0-9_]+)\s*=", raw):
            used.append((p, name))
    compose = r.root / "infra" / "docker-compose.yml"
    if compose.is_file():
        for name in re.findall(r"^\s+(KVCM_[A-Z0-9_]+):", compose.read_text(), re.M):
            used.append((compose, name))
    for where, name in used:
        r.ok(name in valid, "config", where, f"{name} is not a kvcm configuration key (core/config/default.toml)")
    p, env_text, _ = env_of_locals(r, "modules/api")
    r.ok(p is not None, "config", "terraform/modules/api", "locals.environment (kvcm configuration) not found")
    want = {
        "KVCM_META_AUTH": '"true"', "KVCM_CLIENT_IP_HEADER": '"x-forwarded-for"', "KVCM_BIND": '"0.0.0.0"',
        "KVCM_VALKEY_URL": "var.valkey_url", "KVCM_BOOTSTRAP_ADMIN_USER": "var.bootstrap_admin_user",
    }
    flat = env_text.replace("'", '"')
    for k, v in want.items():
        r.ok(re.search(re.escape(k) + r'"?\s*[:=]\s*"?' + re.escape(v.strip('"')), flat) is not None, "config", p or "api", f"the production config must set {k} = {v}")
    # Both secrets are delivered as secrets, not environment.
    for module, names in (("modules/api", ["KVCM_VALKEY_PASSWORD", "KVCM_BOOTSTRAP_ADMIN_PASSWORD"]), ("modules/worker", ["KVCM_VALKEY_PASSWORD"])):
        found = False
        for q, doc in r.docs.items():
            if r.dir_key(q.parent) != module:
                continue
            for loc in doc.get("locals", []):
                if "secrets" in loc:
                    found = True
                    for nme in names:
                        r.ok(nme in text(loc["secrets"]), "config", q, f"{nme} must be in locals.secrets")
        r.ok(found, "config", module, "locals.secrets not found")
    for p2, name, b in r.all("output"):
        if name == "valkey_url":
            r.ok(text(b.get("value", "")).startswith('"rediss://'), "config", p2, "valkey_url must be rediss:// (TLS)")
    for p2, n, b in r.all("variable"):
        if n == "valkey_url":
            r.ok("rediss://" in text(b.get("validation", "")), "config", p2, "variable valkey_url must require rediss://")


def check_container(r: Repo):
    df = r.root / "infra" / "Dockerfile"
    r.ok(df.is_file(), "container", df, "missing")
    if df.is_file():
        lines = [ln.strip() for ln in df.read_text().splitlines() if ln.strip() and not ln.strip().startswith("#")]
        froms = [ln for ln in lines if ln.upper().startswith("FROM ")]
        r.ok(len(froms) >= 2, "container", df, "must be multi-stage")
        users = [ln.split()[1] for ln in lines if ln.upper().startswith("USER ")]
        r.ok(bool(users) and users[-1].split(":")[0] not in ("0", "root"), "container", df, "the runtime stage must run as a non-root USER")
        r.ok(any(ln.upper().startswith("HEALTHCHECK ") for ln in lines), "container", df, "needs a HEALTHCHECK")
        exposed = {x for ln in lines if ln.upper().startswith("EXPOSE ") for x in ln.split()[1:]}
        r.ok({"6382", "6492", "6592"} <= exposed, "container", df, "must EXPOSE 6382 6492 6592")
        for ln in lines:
            if ln.upper().startswith(("ENV ", "ARG ")):
                r.ok(not SECRET_NAME.search(ln), "container", df, f"no secret in the image: {ln}")
    compose = r.root / "infra" / "docker-compose.yml"
    r.ok(compose.is_file(), "container", compose, "missing")
    if not compose.is_file():
        return
    c = yaml.safe_load(compose.read_text())
    services = c.get("services", {})
    nodes = [s for s, v in services.items() if str(v.get("image", "")).startswith("valkey/valkey:") and "--cluster-enabled yes" in str(v.get("command", ""))]
    r.ok(len(nodes) >= 3, "container", compose, "needs 3 Valkey cluster nodes (official valkey image)")
    init = [s for s, v in services.items() if "--cluster create" in str(v.get("command", ""))]
    r.ok(len(init) == 1, "container", compose, "needs one valkey-cli --cluster create job")
    for s in ("kvcm-api", "kvcm-worker"):
        r.ok(s in services, "container", compose, f"missing service {s}")
    api = services.get("kvcm-api", {})
    env = api.get("environment", {}) or {}
    r.ok(str(env.get("KVCM_BOOTSTRAP_ADMIN_PASSWORD_FILE", "")).startswith("/run/secrets/"), "container", compose, "the admin password comes from a compose secret file")
    r.ok(bool(api.get("secrets")), "container", compose, "kvcm-api must mount the admin password secret")
    for name, value in {**env, **(services.get("kvcm-worker", {}).get("environment", {}) or {})}.items():
        if re.search(r"PASSWORD|TOKEN|SECRET", name) and not name.endswith("_FILE"):
            r.fail("container", compose, f"{name} set in the environment: use a secret")
    for name, spec in (c.get("secrets") or {}).items():
        r.ok(isinstance(spec, dict) and ("file" in spec or "environment" in spec), "container", compose, f"secret {name} must come from a file or the environment")


CHECKS = [check_layout, check_variables, check_versions, check_secrets, check_valkey, check_private, check_iam, check_plan, check_config, check_container]


def run_checks(root: pathlib.Path) -> tuple[int, list[str]]:
    r = Repo(root)
    for check in CHECKS:
        check(r)
    return r.checked, r.failures


def main() -> int:
    root = pathlib.Path(sys.argv[1]) if len(sys.argv) > 1 else pathlib.Path(__file__).resolve().parents[2]
    checked, failures = run_checks(root)
    for f in failures:
        print(f)
    tf_files = len(list((root / "terraform").rglob("*.tf")))
    print(f"check_terraform: {tf_files} .tf files parsed, {checked} assertions, {len(failures)} failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
