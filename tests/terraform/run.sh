#!/usr/bin/env bash
# Static checks of the deployment files: `make terraform-check` (and so `make test`) runs this.
# Needs no Docker engine, terraform binary or AWS credentials; the tools come from
# infra/install-python-tools.sh (run by infra/deps.sh). Fails on the first failing step.
set -euo pipefail
ROOT="${KVCM_ROOT:-$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)}"
TOOLS="${KVCM_HOME:-$ROOT/.kvcm}/tools"
cd "$ROOT"
"$ROOT/infra/install-python-tools.sh" >/dev/null

step() { printf '== %s\n' "$*"; }

step "parse every .tf, structural checks (tests/terraform/check_terraform.py)"
PYTHONPATH="$TOOLS/python" python3 tests/terraform/check_terraform.py

step "self-tests of the checks and of the image entrypoint (pytest)"
PYTHONPATH="$TOOLS/python" python3 -m pytest -q -p no:cacheprovider tests/terraform

step "checkov over terraform/"
PYTHONPATH="$TOOLS/checkov" python3 "$TOOLS/checkov/bin/checkov" -d terraform --framework terraform \
  --skip-download --quiet --compact

step "hadolint infra/Dockerfile"
"$TOOLS/python/bin/hadolint" infra/Dockerfile

step "shellcheck"
"$TOOLS/python/bin/shellcheck" infra/docker/*.sh tests/terraform/*.sh

step "yamllint infra/docker-compose.yml"
PYTHONPATH="$TOOLS/python" python3 -m yamllint --strict \
  -d '{extends: default, rules: {line-length: {max: 120}, document-start: disable, truthy: {check-keys: false}}}' \
  infra/docker-compose.yml

step "docker compose config (validates the compose file, no engine needed)"
"$TOOLS/compose/docker-compose" -f infra/docker-compose.yml config --quiet

if command -v terraform >/dev/null 2>&1; then
  step "terraform fmt -check"
  tfrc="$(mktemp)"
  CHECKPOINT_DISABLE=1 TF_CLI_CONFIG_FILE="$tfrc" terraform fmt -check -recursive -diff terraform
  rm -f "$tfrc"
else
  step "terraform fmt -check: skipped (no terraform binary on PATH)"
fi
echo "terraform-check: all checks passed"
