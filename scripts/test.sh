#!/usr/bin/env bash
# scripts/test.sh — everything `make test` runs, fail fast, with timings:
#   0. scripts/install-tools.sh, scripts/stack.sh up test
#   1. go vet (all workspace modules)
#   2. go test -count=1 -race -p 2 -timeout 20m (all workspace modules) with
#      MANGO_TEST_DATABASE_URL, MANGO_TEST_TEMPORAL_HOSTPORT, MANGO_REQUIRE_SERVICES=1
#   2a. the deploy module (GOWORK=off): Helm chart lint and render, compose
#       file, and the container end-to-end run (make images + testcontainers)
#   2b. scripts/fuzz.sh: each fuzz target for MANGO_FUZZ_TIME (default 10s)
#   2c. scripts/faults.sh: the fault-injection suite (its own processes)
#   2d. scripts/soak.sh with MANGO_SOAK=60s: the short soak (its own processes)
#   3. scripts/dev-smoke.sh --fresh-clone (make dev-up in a copy of the tree
#      without bin/ or .mango/, quickstart, make dev-down)
#   4. make verify (generated code up to date, buf lint)
#   5. make lint (golangci-lint in every module)
# The test stack components this run started are stopped at the end unless
# MANGO_KEEP_STACK=1. Extra args are passed to `go test` (e.g. -run Foo).
set -euo pipefail

# shellcheck source=scripts/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
MANGO_LOG_TAG="test"
cd "$REPO_ROOT"
export GOWORK="${REPO_ROOT}/go.work"
MAKE="${MAKE:-make}"

PKGS=(
	github.com/mangohq/mango/api-server/...
	github.com/mangohq/mango/db/...
	github.com/mangohq/mango/execution-worker/...
	github.com/mangohq/mango/internal/...
	github.com/mangohq/mango/proto/...
	github.com/mangohq/mango/scripts/bench/...
)

STARTED_STACK="$(mktemp)"
SUMMARY=()
TOTAL_START=$SECONDS

finish() {
	local rc=$?
	trap - EXIT INT TERM
	if [[ -z "${MANGO_KEEP_STACK:-}" && -s "$STARTED_STACK" ]]; then
		# shellcheck disable=SC2046 # one word per component
		"${REPO_ROOT}/scripts/stack.sh" down test $(sort -u "$STARTED_STACK") || true
	fi
	rm -f "$STARTED_STACK"
	printf '\n==== make test summary (%ss total)\n' "$((SECONDS - TOTAL_START))" >&2
	local line
	for line in "${SUMMARY[@]}"; do printf '  %s\n' "$line" >&2; done
	if ((rc == 0)); then
		ok "make test: PASS"
	else
		err "make test: FAIL"
	fi
	exit "$rc"
}
trap finish EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# step <label> <cmd...>: run, time, record; stop at the first failure.
step() {
	local label="$1" start rc
	shift
	start=$SECONDS
	timed "$label" "$@" && rc=0 || rc=$?
	if ((rc == 0)); then
		SUMMARY+=("ok    $(printf '%5ss' $((SECONDS - start)))  ${label}")
	else
		SUMMARY+=("FAIL  $(printf '%5ss' $((SECONDS - start)))  ${label} (status ${rc})")
		exit "$rc"
	fi
}

test_env() {
	eval "$("${REPO_ROOT}/scripts/stack.sh" env test)"
	export MANGO_REQUIRE_SERVICES=1
	# No registry is reachable and ryuk cannot be pulled (DESIGN.md §9).
	export TESTCONTAINERS_RYUK_DISABLED=true
}

stack_up() { MANGO_STACK_STARTED_FILE="$STARTED_STACK" "${REPO_ROOT}/scripts/stack.sh" up test; }
go_vet() {
	go vet "${PKGS[@]}"
	(cd deploy && GOWORK=off go vet ./...)
}
# live_gates: with the live switches on but no credentials (an empty HOME),
# every live conformance test must skip cleanly with a message.
live_gates() {
	local home out
	home="$(mktemp -d)"
	# A fresh HOME hides any dev.env; keep Go's caches where they are.
	out="$(cd "${REPO_ROOT}/execution-worker" && GOCACHE="$(go env GOCACHE)" GOMODCACHE="$(go env GOMODCACHE)" \
		GOPATH="$(go env GOPATH)" HOME="$home" XDG_CONFIG_HOME="$home" \
		MANGO_LIVE_E2B=1 MANGO_LIVE_CUBE=1 MANGO_LIVE_OPENSANDBOX=1 MANGO_LIVE_DAYTONA=1 MANGO_LIVE_K8S=1 \
		"${REPO_ROOT}/scripts/with-dev-env" env -u E2B_API_KEY -u CUBE_API_URL -u OPEN_SANDBOX_DOMAIN -u DAYTONA_API_KEY \
		-u MANGO_K8S_ROUTER_URL -u KUBECONFIG -u KUBERNETES_SERVICE_HOST \
		go test -count=1 -run LiveConformance -v ./sandbox/... 2>&1)" || { printf '%s\n' "$out"; rm -rf "$home"; return 1; }
	rm -rf "$home"
	local skips
	skips="$(grep -c -- '--- SKIP: TestLiveConformance' <<<"$out" || true)"
	if ((skips < 5)); then
		printf '%s\n' "$out"
		err "expected the 5 live conformance tests to skip, saw ${skips}"
		return 1
	fi
	grep -B1 -- '--- SKIP: TestLiveConformance' <<<"$out" | grep -v -- '^--' | grep -v -- '--- SKIP' | sed -n 's/^ *//p' | sed -n 1,8p
}

# The Docker sandbox image (FROM scratch + busybox, no registry), for the
# tests that run a docker worker; skipped without a daemon.
sandbox_image() {
	if docker info >/dev/null 2>&1; then
		"${REPO_ROOT}/scripts/build-sandbox-image.sh"
	else
		log "no Docker daemon: docker sandbox tests will skip (or fail with MANGO_REQUIRE_SERVICES=1)"
	fi
}
go_test() { go test -count=1 -race -p 2 -timeout 20m "$@" "${PKGS[@]}"; }
# The deploy module is outside go.work (Helm, Kubernetes, compose and
# testcontainers stay out of the services' builds). Its container e2e builds
# the images itself with scripts/build-images.sh.
deploy_test() { (cd deploy && GOWORK=off go test -count=1 -timeout 15m ./...); }

step "install tools" "${REPO_ROOT}/scripts/install-tools.sh"
step "stack up test" stack_up
test_env
log "MANGO_TEST_DATABASE_URL=${MANGO_TEST_DATABASE_URL} MANGO_TEST_TEMPORAL_HOSTPORT=${MANGO_TEST_TEMPORAL_HOSTPORT} MANGO_REQUIRE_SERVICES=1"
step "go vet" go_vet
step "sandbox image" sandbox_image
step "go test" go_test "$@"
step "deploy: chart, compose, containers e2e" deploy_test
step "fuzz" "${REPO_ROOT}/scripts/fuzz.sh"
step "fault injection" "${REPO_ROOT}/scripts/faults.sh"
step "soak (short)" env MANGO_SOAK=60s "${REPO_ROOT}/scripts/soak.sh"
step "dev smoke (fresh clone)" "${REPO_ROOT}/scripts/dev-smoke.sh" --fresh-clone
step "live gates skip" live_gates
step "make verify" "$MAKE" --no-print-directory verify
step "make lint" "$MAKE" --no-print-directory lint
