#!/usr/bin/env bash
# scripts/dev-smoke.sh — end-to-end smoke of the dev runner:
#   make dev-up  ->  go run ./api-server/examples/quickstart (with .dev.env)  ->  make dev-down
# then asserts nothing dev-up started is still running (pids dead, ports free).
# dev-down always runs, also on failure.
#
# --fresh-clone runs all of that in a copy of the tree as a new clone has it
# (tracked and untracked-but-not-ignored files: no bin/, no .mango/, no
# .dev.env), so it proves that `make dev-up` installs what it needs.
set -euo pipefail

# shellcheck source=scripts/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
MANGO_LOG_TAG="dev-smoke"
cd "$REPO_ROOT"

if [[ "${1:-}" == "--fresh-clone" ]]; then
	clone="$(mktemp -d "${TMPDIR:-/tmp}/mango-fresh-clone.XXXXXX")"
	trap 'rm -rf "$clone"' EXIT
	git ls-files -z --cached --others --exclude-standard | tar --null --ignore-failed-read -T - -cf - 2>/dev/null | tar -xf - -C "$clone"
	[[ ! -e "${clone}/bin" && ! -e "${clone}/.mango" ]] || die "the fresh copy has bin/ or .mango/"
	log "fresh copy of the tree (no bin/, no .mango/) in ${clone}"
	rc=0
	env -u GOWORK MANGO_LOG_TAG= "${clone}/scripts/dev-smoke.sh" || rc=$?
	exit "$rc"
fi
export GOWORK="${REPO_ROOT}/go.work"

MAKE="${MAKE:-make}"
STATE_DIR="${STATE_ROOT}/dev"
STACK_RECORD="${STATE_DIR}/dev-up.stack"

if [[ -f "${STATE_DIR}/api-server.pid" ]] && read_pid "${STATE_DIR}/api-server.pid" >/dev/null; then
	die "a dev api-server is already running (make dev / make dev-up); stop it with \`make dev-down\` before the smoke test"
fi
for p in 18080 18081; do
	require_port_free "$p" "the dev api-server"
done

PIDS=()
PORTS=(18080 18081)
DOWN_DONE=0

# collect_started: remember the pids/ports of everything dev-up started.
collect_started() {
	local f pid
	for f in api-server.pid execution-worker.pid execution-worker-docker.pid; do
		if pid="$(read_pid "${STATE_DIR}/${f}")"; then PIDS+=("$pid"); fi
	done
	if [[ -f "$STACK_RECORD" ]]; then
		if grep -qx postgres "$STACK_RECORD"; then
			PORTS+=(15432)
			if [[ -f "${STATE_DIR}/pg/postmaster.pid" ]]; then PIDS+=("$(head -n1 "${STATE_DIR}/pg/postmaster.pid")"); fi
		fi
		if grep -qx temporal "$STACK_RECORD"; then
			PORTS+=(17233 17234 17235)
			if pid="$(read_pid "${STATE_DIR}/temporal.pid")"; then PIDS+=("$pid"); fi
		fi
	fi
}

dev_down() {
	((DOWN_DONE)) && return 0
	DOWN_DONE=1
	"$MAKE" --no-print-directory dev-down
}

on_exit() {
	local rc=$?
	trap - EXIT INT TERM
	if ((rc != 0)); then
		err "smoke failed (status ${rc}); running make dev-down"
		dev_down || true
		for f in api-server execution-worker; do
			if [[ -f "${STATE_DIR}/${f}.log" ]]; then
				printf -- '--- last lines of .mango/dev/%s.log\n' "$f" >&2
				tail -n 20 "${STATE_DIR}/${f}.log" >&2 || true
			fi
		done
	fi
	exit "$rc"
}
trap on_exit EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

log "make dev-up"
"$MAKE" --no-print-directory dev-up >/dev/null
collect_started
log "dev-up started pids: ${PIDS[*]:-none}; ports to be freed: ${PORTS[*]}"

# Workers run without the api-server's secrets.
for f in execution-worker.pid execution-worker-docker.pid; do
	pid="$(read_pid "${STATE_DIR}/${f}")" || continue
	leaked="$(tr '\0' '\n' <"/proc/${pid}/environ" | grep -oE '^MANGO_(API_KEY|VAULT_KEYS|DATABASE_URL)=' || true)"
	[[ -z $leaked ]] || die "${f%.pid} (pid ${pid}) has the api-server's secrets in its environment: ${leaked//$'\n'/ }"
done
ok "workers started without the api-server's secrets"

[[ -f "${REPO_ROOT}/.dev.env" ]] || die ".dev.env not written by dev-up"
log "go run ./api-server/examples/quickstart (with .dev.env)"
(
	set -a
	# shellcheck source=/dev/null
	. "${REPO_ROOT}/.dev.env"
	set +a
	[[ -n "${MANGO_BASE_URL:-}" && -n "${MANGO_API_KEY:-}" ]] || die ".dev.env lacks MANGO_BASE_URL/MANGO_API_KEY"
	timeout 300 go run ./api-server/examples/quickstart
) || die "quickstart failed"
ok "quickstart succeeded"

log "make dev-down"
dev_down

# Assert nothing from dev-up is still running. A process may need a moment to
# exit after it removed its pid file (e.g. postmaster), so allow 10s.
# (pid_alive treats zombies as gone.)
gone() { ! pid_alive "$1"; }
fail=0
for pid in "${PIDS[@]}"; do
	if ! wait_for "pid ${pid} to exit" 10 gone "$pid"; then
		err "pid ${pid} ($(tr '\0' ' ' <"/proc/${pid}/cmdline" 2>/dev/null || true)) still alive after dev-down"
		fail=1
	fi
done
port_free() { ! port_in_use "$1"; }
for p in "${PORTS[@]}"; do
	if ! wait_for "port ${p} to be free" 10 port_free "$p"; then
		err "port ${p} still in use after dev-down"
		fail=1
	fi
done
((fail == 0)) || die "dev-down left processes or ports behind"
ok "dev smoke passed: dev-up, quickstart, dev-down clean"
