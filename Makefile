# kvcm — the two commands that matter: `make run` and `make test`.
SHELL := /bin/bash
export KVCM_ROOT := $(CURDIR)
TEST_VALKEY_PORT ?= 7301

.PHONY: run test fuzz chaos loadtest bench deps build build-release lint unit cluster-up cluster-down clean terraform-check

## run: install what is missing, build, start a local Valkey cluster + kvcm, serve in the foreground
run: deps build-release
	@infra/run.sh

## test: install what is missing, check formatting and lints, run every test on a real cluster
test: deps lint
	@$(MAKE) --no-print-directory terraform-check
	cargo build --workspace --bins
	@rm -rf .kvcm/test-data  # block files of earlier runs' tests
	@infra/valkey-cluster.sh start --base-port $(TEST_VALKEY_PORT) --dir .kvcm/test-valkey >/dev/null
	@set -o pipefail; status=0; mkdir -p .kvcm; \
	  KVCM_TEST_VALKEY_URL=redis://127.0.0.1:$(TEST_VALKEY_PORT) KVCM_TEST_TLS_BASE_PORT=$$(( $(TEST_VALKEY_PORT) + 100 )) \
	  cargo test --workspace --no-fail-fast --lib --bins --tests 2>&1 \
	    | tee .kvcm/test-output.log || status=$$?; \
	  KVCM_TEST_VALKEY_URL=redis://127.0.0.1:$(TEST_VALKEY_PORT) tests/fuzz/run.sh $(FUZZ_SLICE) 2>.kvcm/fuzz-slice.log \
	    | tee .kvcm/fuzz-output.log || { status=1; tail -n 60 .kvcm/fuzz-slice.log; }; \
	  infra/valkey-cluster.sh stop --base-port $(TEST_VALKEY_PORT) --dir .kvcm/test-valkey >/dev/null 2>&1; \
	  awk '/^test result:/ { p += $$4; f += $$6 } END { printf "Summary: %d passed, %d failed\n", p, f }' .kvcm/test-output.log; \
	  exit $$status

## fuzz: Schemathesis + hostile cases against a real stack, at least 100,000 requests
## (make test runs a slice of at least 5,000: FUZZ_SLICE)
FUZZ_SLICE ?= --examples 50 --hostile-rounds 3 --min-requests 5000
FUZZ_FULL ?= --examples 2500 --hostile-rounds 50 --min-requests 100000
fuzz: deps
	cargo build --workspace --bins
	@infra/valkey-cluster.sh start --base-port $(TEST_VALKEY_PORT) --dir .kvcm/test-valkey >/dev/null
	@status=0; KVCM_TEST_VALKEY_URL=redis://127.0.0.1:$(TEST_VALKEY_PORT) tests/fuzz/run.sh $(FUZZ_FULL) || status=$$?; \
	  infra/valkey-cluster.sh stop --base-port $(TEST_VALKEY_PORT) --dir .kvcm/test-valkey >/dev/null 2>&1; \
	  exit $$status

## chaos: the chaos suite (tests/tests/chaos.rs, durability.rs) at CHAOS_SCALE times the load and
## length of the slice `make test` runs (primary killed, frontend and worker kill -9, connection
## resets, storage root gone, hung probe; the auditor after each); figures printed
CHAOS_SCALE ?= 6
chaos: deps
	cargo build --workspace --bins
	@infra/valkey-cluster.sh start --base-port $(TEST_VALKEY_PORT) --dir .kvcm/test-valkey >/dev/null
	@status=0; KVCM_TEST_VALKEY_URL=redis://127.0.0.1:$(TEST_VALKEY_PORT) KVCM_CHAOS_SCALE=$(CHAOS_SCALE) \
	  cargo test -p kvcm-tests --test chaos --test durability -- --nocapture --test-threads 1 || status=$$?; \
	  infra/valkey-cluster.sh stop --base-port $(TEST_VALKEY_PORT) --dir .kvcm/test-valkey >/dev/null 2>&1; \
	  exit $$status

## loadtest: one k6 scenario (SCENARIO=smoke|prefix_read|write|engine_mix|spike|soak) against
## KVCM_META_URL / KVCM_ADMIN_URL with the credentials in the environment — by default the local
## `make run` stack; JSON summary in .kvcm/k6/<scenario>.json (see loadtest/k6/README.md)
SCENARIO ?= smoke
loadtest:
	@loadtest/k6/run.sh $(SCENARIO) $(K6_ARGS)

## bench: the whole benchmark set, briefly (~10 min on 2 cores after the build), on a local
## cluster at BENCH_VALKEY_PORT (7661..7663) running on jemalloc (installs libjemalloc2 with apt
## if missing; BENCH_VALKEY_MALLOC=libc for the wheel's own malloc), release builds, Mooncake's
## store master side by side; summary in .kvcm/bench/summary.{md,json} (docs/benchmarks.md, infra/bench.sh)
BENCH_VALKEY_PORT ?= 7661
bench:
	@BENCH_VALKEY_PORT=$(BENCH_VALKEY_PORT) infra/bench.sh

deps:
	@infra/deps.sh

## terraform-check: static checks of terraform/ (python-hcl2 structural checks, checkov), the
## Dockerfile (hadolint) and docker-compose.yml (yamllint, docker compose config); no terraform
## binary, Docker engine or AWS credentials needed
terraform-check: deps
	@tests/terraform/run.sh

## openapi: regenerate docs/openapi/{meta,admin}.json from the code (commit the result)
.PHONY: openapi
openapi:
	KVCM_UPDATE_OPENAPI=1 cargo test -p kvcm-api --lib openapi::tests::checked_in -- --quiet

build:
	cargo build --workspace --bins

build-release:
	cargo build --release --bins -p kvcm-api -p kvcm-worker

lint:
	cargo fmt --all -- --check
	cargo clippy --workspace --all-targets -- -D warnings

## cluster-up / cluster-down: the local development cluster on 7001..7003
cluster-up: deps
	@infra/valkey-cluster.sh start
cluster-down:
	@infra/valkey-cluster.sh stop

clean:
	cargo clean
	rm -rf .kvcm
