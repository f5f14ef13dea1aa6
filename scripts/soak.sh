#!/usr/bin/env bash
# scripts/soak.sh — the soak (api-server/test/faults TestSoak): real
# processes (api-server, a local execution worker with the scripted fake
# model, the suite's own PostgreSQL cluster and Temporal dev server, on free
# loopback ports), 1,000 idle SSE streams plus 32 sessions doing one-tool
# turns back to back for MANGO_SOAK (default 5m). It fails on any turn
# error, on a stream whose ids differ from its session's list, on an idle
# stream that died, and on api-server or worker RSS growing after warm-up;
# it prints turns/s and the RSS slopes. `make test-soak` runs it for 5
# minutes; the "soak (short)" step of scripts/test.sh for 60 s.
set -euo pipefail

# shellcheck source=scripts/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
MANGO_LOG_TAG="soak"
cd "$REPO_ROOT"
export GOWORK="${REPO_ROOT}/go.work"

[[ -x "${BIN_DIR}/temporal" ]] || "${REPO_ROOT}/scripts/install-tools.sh"
MANGO_PG_BINDIR="$(pg_bindir)" || die "PostgreSQL server binaries not found: run \`make tools\`"
export MANGO_PG_BINDIR MANGO_TEMPORAL_BIN="${BIN_DIR}/temporal"
export MANGO_SOAK="${MANGO_SOAK:-5m}"
export MANGO_REQUIRE_SERVICES="${MANGO_REQUIRE_SERVICES:-1}"
log "soak for ${MANGO_SOAK}"
go test -count=1 -v -run '^TestSoak$' -timeout 30m "$@" ./api-server/test/faults/
