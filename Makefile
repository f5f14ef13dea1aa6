# Mango — developer entry points. `make` or `make help` lists targets.
# Repo modules build in workspace mode (go.work); the tools module in
# scripts/tools is separate and always built with GOWORK=off. Tools run from ./bin.

SHELL := /usr/bin/env bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := help
MAKEFLAGS += --no-print-directory

ROOT    := $(abspath $(dir $(lastword $(MAKEFILE_LIST))))
BIN     := $(ROOT)/bin
MODULES := api-server db execution-worker internal proto scripts/bench
PKGS    := $(foreach m,$(MODULES),github.com/mangohq/mango/$(m)/...)

export GOWORK := $(ROOT)/go.work
export PATH   := $(BIN):$(PATH)

.PHONY: help tools build images generate verify lint test test-faults test-soak fuzz dev dev-up dev-down dev-status dev-env-init \
        stack-up stack-down stack-status test-stack-up test-stack-down migrate bench clean

help: ## Show this help
	@awk 'BEGIN { FS = ":.*## "; printf "Usage: make <target>\n\nTargets:\n" } \
	     /^[a-zA-Z0-9_-]+:.*## / { printf "  %-16s %s\n", $$1, $$2 }' $(MAKEFILE_LIST)

tools: ## Build pinned tools into bin/ (temporal, sqlc, buf, goose, golangci-lint, protoc-gen-*) and check PostgreSQL 15
	@scripts/install-tools.sh

build: ## Build bin/api-server and bin/execution-worker, version and commit stamped
	@. scripts/lib.sh; flags="$$(go_ldflags "$$(build_version)" "$$(build_commit)")"; set -x; \
	go build -ldflags "$$flags" -o $(BIN)/api-server ./api-server/cmd/api-server; \
	go build -ldflags "$$flags" -o $(BIN)/execution-worker ./execution-worker/cmd/execution-worker

images: ## Build the container images (FROM scratch, no registry): mangohq/mango-{api-server,execution-worker,execution-worker-local}:dev
	@scripts/build-images.sh

generate: ## Regenerate sqlc (db/sqlc.yaml) and buf (proto/buf.gen.yaml) output, buf lint
	@if [ -f db/sqlc.yaml ]; then \
	  echo "sqlc generate -f db/sqlc.yaml"; $(BIN)/sqlc generate -f db/sqlc.yaml; \
	else echo "db/sqlc.yaml not found; skipping sqlc"; fi
	@if [ -f proto/buf.gen.yaml ]; then \
	  echo "buf generate (proto/)"; (cd proto && $(BIN)/buf generate); \
	else echo "proto/buf.gen.yaml not found; skipping buf generate"; fi
	@if [ -f proto/buf.yaml ]; then \
	  echo "buf lint (proto/)"; (cd proto && $(BIN)/buf lint); \
	else echo "proto/buf.yaml not found; skipping buf lint"; fi

verify: ## Fail if generated code (db/, proto/) is stale after `make generate`; buf lint
	@scripts/verify.sh

lint: ## Run golangci-lint in each module (api-server db execution-worker internal proto scripts/bench, and deploy with GOWORK=off)
	@rc=0; for m in $(MODULES); do \
	  echo "golangci-lint: $$m"; (cd $$m && $(BIN)/golangci-lint run ./...) || rc=1; \
	done; \
	echo "golangci-lint: deploy"; (cd deploy && GOWORK=off $(BIN)/golangci-lint run ./...) || rc=1; \
	exit $$rc

test: ## Full test run: tools, test stack, go vet, go test, deploy (chart, compose, images e2e), fuzz, faults, fresh-clone dev smoke, verify, lint
	@scripts/test.sh

test-faults: ## Fault-injection suite: real processes, crashes of worker, api-server, PostgreSQL and Temporal mid-turn
	@scripts/faults.sh

test-soak: ## Soak: 1,000 idle SSE streams + 32 sessions doing turns for MANGO_SOAK (default 5m); RSS slopes (make test runs 60s)
	@scripts/soak.sh

fuzz: ## Run each fuzz target for MANGO_FUZZ_TIME (default 10s); FUZZ="FuzzA FuzzB" picks targets
	@scripts/fuzz.sh $(FUZZ)

dev: ## Run api-server + execution-worker in the foreground on the dev stack (Ctrl-C stops all it started)
	@scripts/dev.sh foreground

dev-up: ## Start the dev environment in the background (returns when /readyz is green)
	@scripts/dev.sh up

dev-down: ## Stop what dev-up started
	@scripts/dev.sh down

dev-status: ## Show the dev environment state
	@scripts/dev.sh status

stack-up: ## Start the dev stack only (PostgreSQL :15432, Temporal :17233)
	@scripts/stack.sh up dev

stack-down: ## Stop the dev stack
	@scripts/stack.sh down dev

stack-status: ## Show dev and test stack state
	@scripts/stack.sh status dev || true
	@scripts/stack.sh status test || true

test-stack-up: ## Start the test stack only (PostgreSQL :25432, Temporal :27233)
	@scripts/stack.sh up test

test-stack-down: ## Stop the test stack
	@scripts/stack.sh down test

migrate: ## Apply DB migrations to the dev database (starts the dev stack if needed)
	@scripts/stack.sh up dev postgres
	go build -o $(BIN)/api-server ./api-server/cmd/api-server
	@eval "$$(scripts/stack.sh env dev)"; $(BIN)/api-server migrate

bench: ## Run benchmarks (scripts/bench.sh if present, else go test -bench . -benchtime 1x)
	@if [ -x scripts/bench.sh ]; then scripts/bench.sh; \
	elif [ -f scripts/bench.sh ]; then bash scripts/bench.sh; \
	else go test -run '^$$' -bench . -benchtime 1x $(PKGS); fi

dev-env-init: ## Create ~/.config/mango/dev.env (mode 0600) from config/dev.env.example for opt-in live tests
	@f="$${XDG_CONFIG_HOME:-$$HOME/.config}/mango/dev.env"; \
	if [ -e "$$f" ]; then echo "$$f exists; leaving it alone"; \
	else mkdir -p "$$(dirname "$$f")" && install -m 600 config/dev.env.example "$$f" && echo "created $$f (mode 0600): fill in the credentials you have"; fi

clean: ## Stop dev/test environments and stacks, remove .mango/ and bin/
	-@scripts/dev.sh down
	-@scripts/stack.sh down dev
	-@scripts/stack.sh down test
	rm -rf .mango bin .dev.env
