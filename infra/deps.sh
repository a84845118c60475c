#!/usr/bin/env bash
# Installs what kvcm's build, run and tests need, if missing. Idempotent; safe to run often.
#   infra/deps.sh          Rust toolchain check, Valkey server, fonts for optimizer plots,
#                          the OpenAPI validator the tests use
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

command -v cargo >/dev/null || die "cargo is missing: install the Rust toolchain (https://rustup.rs) first"
for c in rustfmt clippy; do
  if ! cargo "${c/rustfmt/fmt}" --version >/dev/null 2>&1; then
    command -v rustup >/dev/null || die "cargo $c is missing and rustup is not available to add it"
    log "adding rust component $c"
    rustup component add "$c" >&2
  fi
done
"$(dirname "$0")/install-valkey.sh" >/dev/null

# The optimizer renders plot text with a TrueType font found at run time.
if ! ls /usr/share/fonts/truetype/dejavu/DejaVuSans.ttf >/dev/null 2>&1; then
  if command -v apt-get >/dev/null && [ "$(id -u)" = 0 ]; then
    log "installing fonts-dejavu-core (plot labels)"
    (apt-get install -y -q fonts-dejavu-core >/dev/null 2>&1 \
      || (apt-get update -q >/dev/null 2>&1 && apt-get install -y -q fonts-dejavu-core >/dev/null 2>&1)) \
      || log "warning: could not install fonts-dejavu-core; optimizer plots will be skipped"
  else
    log "warning: no DejaVu font and no root apt-get; optimizer plots will be skipped"
  fi
fi

# The OpenAPI 3.1 validator that tests/tests/openapi.rs runs over docs/openapi/*.json, installed
# (with its dependencies) into .kvcm/tools like Valkey; run as
#   PYTHONPATH=.kvcm/tools/openapi-spec-validator python3 -m openapi_spec_validator FILE
OPENAPI_VALIDATOR_PIN="openapi-spec-validator==0.9.0"
OPENAPI_VALIDATOR_DIR="$KVCM_HOME/tools/openapi-spec-validator"
if [ "$(cat "$OPENAPI_VALIDATOR_DIR/.kvcm-pin" 2>/dev/null)" != "$OPENAPI_VALIDATOR_PIN" ] \
  || ! PYTHONPATH="$OPENAPI_VALIDATOR_DIR" python3 -c "import openapi_spec_validator" 2>/dev/null; then
  log "installing $OPENAPI_VALIDATOR_PIN into $OPENAPI_VALIDATOR_DIR"
  rm -rf "$OPENAPI_VALIDATOR_DIR.tmp"
  python3 -m pip install --quiet --disable-pip-version-check --no-warn-conflicts \
    --target "$OPENAPI_VALIDATOR_DIR.tmp" "$OPENAPI_VALIDATOR_PIN" \
    || die "pip could not install $OPENAPI_VALIDATOR_PIN"
  echo "$OPENAPI_VALIDATOR_PIN" > "$OPENAPI_VALIDATOR_DIR.tmp/.kvcm-pin"
  rm -rf "$OPENAPI_VALIDATOR_DIR" && mv "$OPENAPI_VALIDATOR_DIR.tmp" "$OPENAPI_VALIDATOR_DIR"
fi

# The fuzzer's Python tools (Schemathesis, redis-py), for the fuzz slice of `make test`.
"$(dirname "$0")/install-python-tools.sh" >/dev/null
