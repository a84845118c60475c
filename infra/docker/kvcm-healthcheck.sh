#!/bin/sh
# Container health probe of the kvcm image (Docker HEALTHCHECK, ECS container healthCheck).
#   kvcm-api:    GET /api/healthy on the meta port (200 while Valkey answers the frontend's PINGs)
#   kvcm-worker: GET /metrics on the worker's metrics port (the worker is up and serving)
# Which one runs is read from PID 1's command line (the entrypoint execs the program).
set -eu
cmdline="$(tr '\0' ' ' </proc/1/cmdline 2>/dev/null || true)"
case "$cmdline" in
  *kvcm-worker*) url="http://127.0.0.1:${KVCM_WORKER__METRICS_PORT:-6592}/metrics" ;;
  *) url="http://127.0.0.1:${KVCM_META_PORT:-6382}/api/healthy" ;;
esac
exec curl --fail --silent --show-error --max-time 2 --output /dev/null "$url"
