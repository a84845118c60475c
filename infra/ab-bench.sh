#!/usr/bin/env bash
# Side by side: one kvcm-bench command run by two builds, alternating, each run on a fresh local
# cluster (jemalloc preloaded, as `make bench`). This machine is shared and noisy, so two builds
# are compared in one session, interleaved, never against figures from another hour.
#
#   infra/ab-bench.sh GIT_REV [RUNS] -- KVCM_BENCH_ARGS...
#
# builds kvcm-bench at GIT_REV (a worktree under .kvcm/ab/, its own target directory) and at the
# working tree, then runs `kvcm-bench --valkey <cluster> KVCM_BENCH_ARGS...` RUNS times (3) with
# each, GIT_REV first, printing every run's lines under a header with the build and the load.
# Example (docs/benchmarks.md, "Specs kept per block"):
#   infra/ab-bench.sh 0a6b8ae 3 -- events --sizes 20000 --rounds 5 --requests 50 --hosts 4
# Environment: AB_VALKEY_PORT (7701: cluster 7701..7703). The worktree stays for the next
# comparison; `git worktree remove .kvcm/ab/<sha>` deletes it.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
[ $# -ge 3 ] || die "usage: infra/ab-bench.sh GIT_REV [RUNS] -- KVCM_BENCH_ARGS..."
rev="$1"
shift
runs=3
if [ "$1" != "--" ]; then
    runs="$1"
    shift
fi
[ "${1:-}" = "--" ] || die "usage: infra/ab-bench.sh GIT_REV [RUNS] -- KVCM_BENCH_ARGS..."
shift
port="${AB_VALKEY_PORT:-7701}"
dir="$KVCM_HOME/ab"
sha="$(git -C "$KVCM_ROOT" rev-parse --verify "$rev^{commit}")" || die "$rev is not a commit"
tree="$dir/$sha"
mkdir -p "$dir"
if [ ! -d "$tree" ]; then
    log "checking out $rev into $tree"
    git -C "$KVCM_ROOT" worktree add --detach -f "$tree" "$sha" >/dev/null
fi
log "building kvcm-bench at $rev and at the working tree"
(cd "$tree" && cargo build --release -q -p kvcm-loadtest) || die "building $rev failed"
(cd "$KVCM_ROOT" && cargo build --release -q -p kvcm-loadtest) || die "building the working tree failed"
"$KVCM_ROOT/infra/install-valkey.sh" >/dev/null
malloc="$("$KVCM_ROOT/infra/install-jemalloc.sh")"
cluster() {
    "$KVCM_ROOT/infra/valkey-cluster.sh" "$@" --base-port "$port" --dir "$dir/valkey"
}
trap 'cluster stop >/dev/null 2>&1' EXIT
for i in $(seq 1 "$runs"); do
    for side in "$rev:$tree" "working tree:$KVCM_ROOT"; do
        name="${side%%:*}"
        root="${side#*:}"
        cluster stop >/dev/null 2>&1
        rm -rf "$dir/valkey"
        cluster start --preload "$malloc" >/dev/null
        echo "== run $i/$runs, $name (load $(cut -d' ' -f1 /proc/loadavg))"
        "$root/target/release/kvcm-bench" --valkey "redis://127.0.0.1:$port" "$@"
    done
done
