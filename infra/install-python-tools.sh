#!/usr/bin/env bash
# Installs the Python tools of kvcm's tests (infra/requirements-test.txt: Schemathesis for the
# API fuzzer, redis-py for its Valkey checks) into the project-local virtualenv .kvcm/venv, if
# they are missing or the requirements changed. Idempotent; prints the venv's bin directory.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

VENV="$KVCM_HOME/venv"
REQ="$KVCM_ROOT/infra/requirements-test.txt"
STAMP="$VENV/.requirements"
if [ -x "$VENV/bin/python" ] && [ -f "$STAMP" ] && cmp -s "$REQ" "$STAMP"; then
  echo "$VENV/bin"
  exit 0
fi
command -v python3 >/dev/null || die "python3 is required for the test tools (apt-get install python3)"
if ! python3 -m venv --help >/dev/null 2>&1 || ! python3 -c 'import ensurepip' >/dev/null 2>&1; then
  if command -v apt-get >/dev/null && [ "$(id -u)" = 0 ]; then
    log "installing python3-venv"
    apt-get install -y -q python3-venv >/dev/null 2>&1 || (apt-get update -q >/dev/null 2>&1 && apt-get install -y -q python3-venv >/dev/null 2>&1) \
      || die "could not install python3-venv"
  else
    die "python3 cannot create virtualenvs: install python3-venv"
  fi
fi
log "installing the Python test tools into $VENV"
rm -rf "$VENV"
python3 -m venv "$VENV" || die "could not create $VENV"
"$VENV/bin/python" -m pip install --quiet --disable-pip-version-check -r "$REQ" \
  || die "pip could not install $REQ"
cp "$REQ" "$STAMP"
echo "$VENV/bin"
