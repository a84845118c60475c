#!/usr/bin/env bash
# Installs what kvcm's build, run and tests need, if missing. Idempotent; safe to run often.
#   infra/deps.sh          Rust toolchain check, Valkey server, fonts for optimizer plots,
#                          stunnel4 and openssl for the TLS tests, the Python tools the tests use
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

# The TLS tests (tests/tests/tls.rs) front a local cluster with stunnel as the TLS terminator
# (the Valkey wheel is built without TLS) and make throwaway certificates with the openssl CLI.
for pkg in stunnel4:stunnel4 openssl:openssl; do
  bin="${pkg%%:*}"; deb="${pkg##*:}"
  command -v "$bin" >/dev/null && continue
  if command -v apt-get >/dev/null && [ "$(id -u)" = 0 ]; then
    log "installing $deb (TLS tests)"
    (apt-get install -y -q "$deb" >/dev/null 2>&1 \
      || (apt-get update -q >/dev/null 2>&1 && apt-get install -y -q "$deb" >/dev/null 2>&1)) \
      || die "could not install $deb, which the TLS tests need (apt-get install $deb)"
  else
    die "$bin is missing and there is no root apt-get to install it: apt-get install $deb (the TLS tests need it)"
  fi
done

# The tests' Python tools: Schemathesis and redis-py (the fuzz slice of `make test`),
# openapi-spec-validator (tests/tests/openapi.rs), cargo-lambda (tests/tests/lambda.rs) and the
# deployment checks' linters (make terraform-check).
"$(dirname "$0")/install-python-tools.sh" >/dev/null
