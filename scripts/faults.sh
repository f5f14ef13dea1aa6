#!/usr/bin/env bash
# scripts/faults.sh — the fault-injection suite (api-server/test/faults):
# real processes (api-server, local and docker execution workers with the
# scripted fake model, a PostgreSQL cluster and a Temporal dev server on its
# file store, all of the suite's own, on free loopback ports), 16 local and
# 4 docker sessions running one-tool turns, and mid-turn crashes of every
# process. It prints ambiguous results and recovery seconds per fault.
# `make test-faults` and the "faults" step of scripts/test.sh run it. Extra
# arguments go to `go test` (e.g. -count=3). MANGO_FAULTS_KEEP=1 keeps the
# logs and state of a passing run too.
set -euo pipefail

# shellcheck source=scripts/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
MANGO_LOG_TAG="faults"
cd "$REPO_ROOT"
export GOWORK="${REPO_ROOT}/go.work"

[[ -x "${BIN_DIR}/temporal" ]] || "${REPO_ROOT}/scripts/install-tools.sh"
if docker info >/dev/null 2>&1; then
	"${REPO_ROOT}/scripts/build-sandbox-image.sh"
fi
MANGO_PG_BINDIR="$(pg_bindir)" || die "PostgreSQL server binaries not found: run \`make tools\`"
export MANGO_PG_BINDIR MANGO_FAULTS=1 MANGO_TEMPORAL_BIN="${BIN_DIR}/temporal"
export MANGO_REQUIRE_SERVICES="${MANGO_REQUIRE_SERVICES:-1}"
go test -count=1 -v -run '^(TestFaults|TestSelfHostedFaults|TestMultiagentFaults|TestOutcomeFaults|TestDeploymentFaults|TestThroughputRatios)$' -timeout 25m "$@" ./api-server/test/faults/
