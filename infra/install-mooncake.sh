#!/usr/bin/env bash
# Installs the peer that `make bench` measures kvcm against: Mooncake's store master (C++) and
# its Python client, from the `mooncake-transfer-engine-non-cuda` wheel, unzipped (not
# pip-installed) into .kvcm/tools/mooncake, plus the shared libraries the master links against
# (libibverbs1 librdmacm1 libnuma1, from apt). Idempotent; prints the folder.
#   $MC/mooncake/mooncake_master    the master binary
#   $MC on sys.path                 `from mooncake.store import MooncakeDistributedStore`
#   LD_LIBRARY_PATH                 $MC/mooncake_transfer_engine_non_cuda.libs:$MC/mooncake:$MC/cudart
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
MOONCAKE_PIN="mooncake-transfer-engine-non-cuda==0.3.13"
# The "non-cuda" wheel's Python client (store.so) still links libcudart.so.12 (it never calls it
# without a GPU): NVIDIA's runtime wheel supplies the library, unzipped next to it.
CUDART_PIN="nvidia-cuda-runtime-cu12==12.9.79"
MC="$KVCM_HOME/tools/mooncake"

for lib in libibverbs.so.1 librdmacm.so.1 libnuma.so.1; do
  ldconfig -p 2>/dev/null | grep -q "$lib" && continue
  if command -v apt-get >/dev/null && [ "$(id -u)" = 0 ]; then
    log "installing libibverbs1 librdmacm1 libnuma1 (Mooncake master's shared libraries)"
    (apt-get install -y -q libibverbs1 librdmacm1 libnuma1 >/dev/null 2>&1 \
      || (apt-get update -q >/dev/null 2>&1 && apt-get install -y -q libibverbs1 librdmacm1 libnuma1 >/dev/null 2>&1)) \
      || die "could not install libibverbs1 librdmacm1 libnuma1 (apt-get install them)"
    break
  else
    die "$lib is missing and there is no root apt-get: apt-get install libibverbs1 librdmacm1 libnuma1"
  fi
done

if [ ! -x "$MC/mooncake/mooncake_master" ]; then
  command -v python3 >/dev/null || die "python3 is required to fetch Mooncake"
  py="$(python3 -c 'import sys; print("%d.%d" % sys.version_info[:2])')"
  [ "$py" = 3.11 ] || die "the Mooncake 0.3.13 wheel is built for CPython 3.11 only, and python3 here is $py: make bench needs a python3 3.11"
  tmp="$MC.tmp"
  rm -rf "$tmp" && mkdir -p "$tmp"
  log "fetching $MOONCAKE_PIN into $MC"
  python3 -m pip download --quiet --disable-pip-version-check --no-deps --dest "$tmp/wheel" "$MOONCAKE_PIN" \
    || die "pip could not download $MOONCAKE_PIN"
  python3 -m zipfile -e "$tmp"/wheel/*.whl "$tmp/" || die "could not unzip the Mooncake wheel"
  python3 -m pip download --quiet --disable-pip-version-check --no-deps --dest "$tmp/cudart-wheel" "$CUDART_PIN" \
    || die "pip could not download $CUDART_PIN"
  python3 -m zipfile -e "$tmp"/cudart-wheel/*.whl "$tmp/cudart-wheel/x" || die "could not unzip the CUDA runtime wheel"
  mkdir -p "$tmp/cudart" && cp "$tmp"/cudart-wheel/x/nvidia/cuda_runtime/lib/libcudart.so.12 "$tmp/cudart/"
  rm -rf "$tmp/wheel" "$tmp/cudart-wheel"
  chmod +x "$tmp/mooncake/mooncake_master"
  rm -rf "$MC" && mv "$tmp" "$MC"
fi
export LD_LIBRARY_PATH="$MC/mooncake_transfer_engine_non_cuda.libs:$MC/mooncake:$MC/cudart${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
missing="$(ldd "$MC/mooncake/mooncake_master" | grep 'not found' || true)"
[ -z "$missing" ] || die "mooncake_master misses shared libraries: $missing"
missing="$(ldd "$MC/mooncake/store.so" | grep 'not found' || true)"
[ -z "$missing" ] || die "Mooncake's Python client misses shared libraries: $missing"
echo "$MC"
