#!/usr/bin/env bash
# scripts/dev.sh — run Mango locally against the dev stack.
#
#   scripts/dev.sh foreground   (make dev)      run until Ctrl-C, then stop what it started
#   scripts/dev.sh up           (make dev-up)   start in the background, return once /readyz is green
#   scripts/dev.sh down         (make dev-down) stop exactly what `up` started
#   scripts/dev.sh status
#
# Ports: HTTP 127.0.0.1:18080, gRPC (ControlPlane) 127.0.0.1:18081, plus the
# dev stack (PostgreSQL 15432, Temporal 17233; see scripts/stack.sh).
# State, pid files and logs: .mango/dev/. The dev API key and worker token are
# generated once and persisted in .mango/dev/api-key and .mango/dev/worker-token.
# MANGO_BASE_URL and MANGO_API_KEY are written to .dev.env (git-ignored).
# MANGO_MODEL (default fake) and MANGO_SANDBOX (default local) are passed
# through to the execution-worker. MANGO_DEV_SKIP_BUILD=1 uses the existing
# bin/ binaries instead of rebuilding them. MANGO_DEV_PPROF=1 serves the
# profiles (MANGO_PPROF_ADDR) of the api-server on 127.0.0.1:16060, the
# worker on 16061 and the docker worker on 16062.
set -euo pipefail

# shellcheck source=scripts/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
MANGO_LOG_TAG="dev"

MODE="${1:-foreground}"
STATE_DIR="${STATE_ROOT}/dev"
HTTP_ADDR="127.0.0.1:18080"
GRPC_ADDR="127.0.0.1:18081"
BASE_URL="http://${HTTP_ADDR}"
API_BIN="${BIN_DIR}/api-server"
WORKER_BIN="${BIN_DIR}/execution-worker"
API_PIDFILE="${STATE_DIR}/api-server.pid"
WORKER_PIDFILE="${STATE_DIR}/execution-worker.pid"
DOCKER_WORKER_PIDFILE="${STATE_DIR}/execution-worker-docker.pid"
API_LOG="${STATE_DIR}/api-server.log"
WORKER_LOG="${STATE_DIR}/execution-worker.log"
MIGRATE_LOG="${STATE_DIR}/migrate.log"
# Stack components (postgres, temporal) that `dev.sh up` started; `down` stops only those.
STACK_RECORD="${STATE_DIR}/dev-up.stack"
DEV_ENV_FILE="${REPO_ROOT}/.dev.env"
READY_TIMEOUT="${MANGO_DEV_READY_TIMEOUT:-60}"
STACK="${REPO_ROOT}/scripts/stack.sh"

mkdir -p "$STATE_DIR"
cd "$REPO_ROOT"
export GOWORK="${REPO_ROOT}/go.work"

# ------------------------------------------------------------- secrets
# persistent_secret <file> <prefix>: create once, then reuse (stable across restarts).
persistent_secret() {
	local f="$1" prefix="$2"
	if [[ ! -s "$f" ]]; then
		(
			umask 077
			printf '%s%s\n' "$prefix" "$(random_hex 16)" >"$f"
		)
	fi
	head -n1 "$f"
}

setup_env() {
	local k
	k="$(persistent_secret "${STATE_DIR}/api-key" mango-dev-)"
	eval "$("$STACK" env dev)"
	export MANGO_API_KEY="$k"
	MANGO_WORKER_TOKEN="$(persistent_secret "${STATE_DIR}/worker-token" mango-worker-)"
	export MANGO_WORKER_TOKEN
	# The key that seals stored secrets (repository tokens): one dev key,
	# kept with the stack's state so restarts can open what was sealed.
	if [[ -z "${MANGO_VAULT_KEYS:-}" ]]; then
		if [[ ! -s "${STATE_DIR}/vault-keys" ]]; then
			(
				umask 077
				printf 'dev1:%s\n' "$(head -c 32 /dev/urandom | base64 -w0)" >"${STATE_DIR}/vault-keys"
			)
		fi
		MANGO_VAULT_KEYS="$(head -n1 "${STATE_DIR}/vault-keys")"
		export MANGO_VAULT_KEYS
	fi
	export MANGO_TEMPORAL_NAMESPACE="${MANGO_TEMPORAL_NAMESPACE:-default}"
	export MANGO_HTTP_ADDR="$HTTP_ADDR"
	export MANGO_GRPC_ADDR="$GRPC_ADDR"
	export MANGO_CONTROLPLANE_ADDR="$GRPC_ADDR"
	export MANGO_SANDBOX="${MANGO_SANDBOX:-local}"
	export MANGO_MODEL="${MANGO_MODEL:-fake}"
	# Development MCP servers usually run on this machine; production
	# workers refuse loopback and private addresses (netguard).
	export MANGO_MCP_ALLOW_PRIVATE="${MANGO_MCP_ALLOW_PRIVATE:-1}"
	export MANGO_WEBHOOK_ALLOW_PRIVATE="${MANGO_WEBHOOK_ALLOW_PRIVATE:-1}"
	export MANGO_BASE_URL="$BASE_URL"
	# With a Docker daemon, sessions may also choose the docker provider
	# (environment metadata {"mango.sandbox": "docker"}); a second worker
	# serves it.
	if [[ -z "${MANGO_SANDBOX_PROVIDERS:-}" && "$MANGO_SANDBOX" == local ]] && docker_available; then
		export MANGO_SANDBOX_PROVIDERS=local,docker
		DOCKER_WORKER=1
	fi
}

# ------------------------------------------------------------- build
build_binaries() {
	if [[ -n "${MANGO_DEV_SKIP_BUILD:-}" ]]; then
		need "$API_BIN" "run \`make build\`"
		need "$WORKER_BIN" "run \`make build\`"
		log "MANGO_DEV_SKIP_BUILD set: using existing bin/api-server and bin/execution-worker"
		return 0
	fi
	log "building bin/api-server and bin/execution-worker"
	go build -o "$API_BIN" ./api-server/cmd/api-server ||
		die "building api-server failed (go build ./api-server/cmd/api-server); see the compiler output above"
	go build -o "$WORKER_BIN" ./execution-worker/cmd/execution-worker ||
		die "building execution-worker failed (go build ./execution-worker/cmd/execution-worker); see the compiler output above"
}

migrate() {
	log "applying migrations (bin/api-server migrate)"
	if ! "$API_BIN" migrate >"$MIGRATE_LOG" 2>&1; then
		tail -n 30 "$MIGRATE_LOG" >&2 || true
		die "bin/api-server migrate failed; see ${MIGRATE_LOG}"
	fi
}

# ------------------------------------------------------------- processes
# start_bg <name> <pidfile> <log> <cmd...>: own session, so a terminal Ctrl-C
# reaches only this script, which then stops children in order.
start_bg() {
	local name="$1" pidfile="$2" logf="$3"
	shift 3
	printf '\n==== %s: starting %s\n' "$(date -Is)" "$name" >>"$logf"
	setsid "$@" </dev/null >>"$logf" 2>&1 &
	local pid=$!
	printf '%s\n' "$pid" >"$pidfile"
	log "started ${name} (pid ${pid}, log ${logf#"${REPO_ROOT}/"})"
}

start_api() {
	local p
	for p in "${HTTP_ADDR##*:}" "${GRPC_ADDR##*:}"; do
		require_port_free "$p" "api-server"
	done
	# shellcheck disable=SC2086 # an unset MANGO_DEV_PPROF adds no word
	start_bg api-server "$API_PIDFILE" "$API_LOG" env ${MANGO_DEV_PPROF:+MANGO_PPROF_ADDR=127.0.0.1:16060} "$API_BIN"
}

# The api-server's secrets, which a worker never needs (PostgreSQL and
# the vault belong to the api-server; workers reach both through the
# ControlPlane): workers start without them, as in the Helm chart.
WORKER_UNSET=(-u MANGO_API_KEY -u MANGO_VAULT_KEYS -u MANGO_DATABASE_URL)

# shellcheck disable=SC2086 # an unset MANGO_DEV_PPROF adds no word
start_worker() { start_bg execution-worker "$WORKER_PIDFILE" "$WORKER_LOG" env "${WORKER_UNSET[@]}" ${MANGO_DEV_PPROF:+MANGO_PPROF_ADDR=127.0.0.1:16061} "$WORKER_BIN"; }

# wait_ready: /readyz green within READY_TIMEOUT, failing early if a child died.
wait_ready() {
	local deadline=$((SECONDS + READY_TIMEOUT))
	log "waiting for ${BASE_URL}/readyz (timeout ${READY_TIMEOUT}s)"
	while ! http_ok "${BASE_URL}/readyz" 2>/dev/null; do
		if ! read_pid "$API_PIDFILE" >/dev/null; then
			tail -n 30 "$API_LOG" >&2 || true
			err "api-server exited before becoming ready; see ${API_LOG}"
			return 1
		fi
		if ! read_pid "$WORKER_PIDFILE" >/dev/null; then
			tail -n 30 "$WORKER_LOG" >&2 || true
			err "execution-worker exited during startup; see ${WORKER_LOG}"
			return 1
		fi
		if ((SECONDS >= deadline)); then
			tail -n 30 "$API_LOG" >&2 || true
			err "timed out after ${READY_TIMEOUT}s waiting for ${BASE_URL}/readyz; see ${API_LOG}"
			return 1
		fi
		sleep 0.2
	done
	ok "api-server ready at ${BASE_URL}"
}

stop_children() {
	stop_pidfile execution-worker-docker "$DOCKER_WORKER_PIDFILE" 20
	stop_pidfile execution-worker "$WORKER_PIDFILE" 20
	stop_pidfile api-server "$API_PIDFILE" 20
}

# stack_down_recorded <file>: stop the stack components listed in file.
stack_down_recorded() {
	local f="$1"
	[[ -s "$f" ]] || return 0
	local comps
	comps="$(sort -u "$f" | tr '\n' ' ')"
	# shellcheck disable=SC2086 # word splitting of the component list is intended
	"$STACK" down dev $comps || warn "stack down dev ${comps} failed"
	rm -f "$f"
}

# ------------------------------------------------------------- docker hook
docker_available() { command -v docker >/dev/null 2>&1 && timeout 5 docker info >/dev/null 2>&1; }

DOCKER_WORKER=0

# start_docker_worker: when a Docker daemon is reachable, a second
# execution-worker serves the docker provider (its sandbox image is built
# first, without any registry). Its log is execution-worker-docker.log.
start_docker_worker() {
	((DOCKER_WORKER)) || return 0
	if read_pid "$DOCKER_WORKER_PIDFILE" >/dev/null; then
		return 0 # still running (dev-up after only the local worker died)
	fi
	if ! "${REPO_ROOT}/scripts/build-sandbox-image.sh"; then
		warn "building the docker sandbox image failed; not starting the docker worker"
		return 0
	fi
	start_bg execution-worker-docker "$DOCKER_WORKER_PIDFILE" "${STATE_DIR}/execution-worker-docker.log" \
		env "${WORKER_UNSET[@]}" MANGO_SANDBOX=docker ${MANGO_DEV_PPROF:+MANGO_PPROF_ADDR=127.0.0.1:16062} "$WORKER_BIN"
}

# ------------------------------------------------------------- banner
write_dev_env() {
	cat >"$DEV_ENV_FILE" <<EOF
MANGO_BASE_URL=${BASE_URL}
MANGO_API_KEY=${MANGO_API_KEY}
EOF
	chmod 600 "$DEV_ENV_FILE"
}

banner() {
	write_dev_env
	cat <<EOF

================================================================ Mango dev
  API (HTTP)          ${BASE_URL}        (readyz: ${BASE_URL}/readyz)
  Console             ${BASE_URL}/console (sign in with the API key below)
  ControlPlane (gRPC) ${GRPC_ADDR}
  PostgreSQL          ${MANGO_DATABASE_URL}
  Temporal            ${MANGO_TEMPORAL_HOSTPORT} (UI/HTTP 127.0.0.1:17234)
  worker              MANGO_SANDBOX=${MANGO_SANDBOX} MANGO_MODEL=${MANGO_MODEL}
  logs                .mango/dev/api-server.log .mango/dev/execution-worker.log

  Written to .dev.env (load with: set -a; . ./.dev.env; set +a):
    MANGO_BASE_URL=${BASE_URL}
    MANGO_API_KEY=${MANGO_API_KEY}

  Try it:
    curl -s \$MANGO_BASE_URL/v1/agents -H "x-api-key: \$MANGO_API_KEY" -H 'anthropic-version: 2023-06-01' -H 'content-type: application/json' -d '{"name":"hello","model":"claude-sonnet-5"}'

  Go SDK (github.com/anthropics/anthropic-sdk-go):
    client := anthropic.NewClient(option.WithBaseURL(os.Getenv("MANGO_BASE_URL")), option.WithAPIKey(os.Getenv("MANGO_API_KEY")))
    agent, err := client.Beta.Agents.New(ctx, ...)

    go run ./api-server/examples/quickstart

  Self-hosted tools (docs/self-hosted.md): create an environment with
  {"config":{"type":"self_hosted"}}, then a key for it (shown once):
    curl -s \$MANGO_BASE_URL/admin/environments/env_.../keys -H "x-api-key: \$MANGO_API_KEY" -H 'content-type: application/json' -d '{"name":"laptop"}'
  and run the SDK's worker with it: go run ./api-server/examples/selfhosted
EOF
	if ((DOCKER_WORKER)); then
		cat <<'EOF'

  Docker: a second worker serves the docker sandbox provider. Sessions in an
  environment with metadata {"mango.sandbox": "docker"} run their tools in a
  container (image mango-sandbox:latest, no network).
EOF
	fi
	printf '==========================================================================\n\n'
}

# ------------------------------------------------------------- modes
FG_STARTED_STACK=""
FG_TAIL_PID=""
cleanup_fg() {
	local rc=$?
	trap - EXIT INT TERM
	if [[ -n "$FG_TAIL_PID" ]]; then kill "$FG_TAIL_PID" 2>/dev/null || true; fi
	log "shutting down"
	stop_children
	stack_down_recorded "$FG_STARTED_STACK"
	rm -f "$FG_STARTED_STACK"
	exit "$rc"
}

mode_foreground() {
	if read_pid "$API_PIDFILE" >/dev/null || read_pid "$WORKER_PIDFILE" >/dev/null; then
		die "a dev api-server/worker is already running (pid files in .mango/dev); run \`make dev-down\` first"
	fi
	FG_STARTED_STACK="$(mktemp "${STATE_DIR}/fg-stack.XXXXXX")"
	trap cleanup_fg EXIT
	trap 'exit 130' INT
	trap 'exit 143' TERM

	setup_env
	MANGO_STACK_STARTED_FILE="$FG_STARTED_STACK" "$STACK" up dev
	build_binaries
	migrate
	start_api
	start_worker
	start_docker_worker
	wait_ready
	banner
	log "Ctrl-C to stop (following logs)"
	tail -n 0 -F "$API_LOG" "$WORKER_LOG" &
	FG_TAIL_PID=$!
	local api_pid worker_pid
	api_pid="$(read_pid "$API_PIDFILE")" || die "api-server died"
	worker_pid="$(read_pid "$WORKER_PIDFILE")" || die "execution-worker died"
	# Children keep their pid through setsid (no fork in a non-interactive shell);
	# bash reaps them, so a crashed child makes pid_alive false.
	while pid_alive "$api_pid" && pid_alive "$worker_pid"; do
		sleep 1 &
		wait $! || true
	done
	err "a child exited unexpectedly; see ${API_LOG} and ${WORKER_LOG}"
	exit 1
}

UP_STARTED_STACK=""
UP_STARTED_API=0
UP_STARTED_WORKER=0
UP_SUCCESS=0
cleanup_up() {
	local rc=$?
	trap - EXIT INT TERM
	if ((UP_SUCCESS == 0)); then
		err "dev-up failed; stopping what this invocation started"
		if ((UP_STARTED_WORKER)); then stop_pidfile execution-worker "$WORKER_PIDFILE" 20; fi
		if ((UP_STARTED_API)); then stop_pidfile api-server "$API_PIDFILE" 20; fi
		stack_down_recorded "$UP_STARTED_STACK"
	else
		cat "$UP_STARTED_STACK" >>"$STACK_RECORD"
	fi
	rm -f "$UP_STARTED_STACK"
	exit "$rc"
}

mode_up() {
	local api_alive=0 worker_alive=0
	if read_pid "$API_PIDFILE" >/dev/null; then api_alive=1; fi
	if read_pid "$WORKER_PIDFILE" >/dev/null; then worker_alive=1; fi
	setup_env
	local docker_alive=1
	if ((DOCKER_WORKER)) && ! read_pid "$DOCKER_WORKER_PIDFILE" >/dev/null; then docker_alive=0; fi
	if ((api_alive && worker_alive && docker_alive)) && http_ok "${BASE_URL}/readyz" 2>/dev/null; then
		log "already running"
		banner
		return 0
	fi

	# On failure, stop what this invocation started (and nothing else).
	UP_STARTED_STACK="$(mktemp "${STATE_DIR}/up-stack.XXXXXX")"
	trap cleanup_up EXIT
	trap 'exit 130' INT
	trap 'exit 143' TERM

	MANGO_STACK_STARTED_FILE="$UP_STARTED_STACK" "$STACK" up dev
	build_binaries
	if ((!api_alive)); then
		migrate
		UP_STARTED_API=1
		start_api
	fi
	if ((!worker_alive)); then
		UP_STARTED_WORKER=1
		start_worker
	fi
	start_docker_worker
	wait_ready
	UP_SUCCESS=1
	banner
	log "running in the background; stop with: make dev-down"
}

mode_down() {
	stop_children
	stack_down_recorded "$STACK_RECORD"
	rm -f "$STACK_RECORD"
	ok "dev stopped"
}

mode_status() {
	local pid pair
	for pair in "api-server:${API_PIDFILE}" "execution-worker:${WORKER_PIDFILE}" "execution-worker-docker:${DOCKER_WORKER_PIDFILE}"; do
		if pid="$(read_pid "${pair#*:}")"; then
			printf '  %-17s running  pid %s\n' "${pair%%:*}" "$pid"
		else
			printf '  %-17s stopped\n' "${pair%%:*}"
		fi
	done
	if http_ok "${BASE_URL}/readyz" 2>/dev/null; then
		printf '  %-17s %s\n' readyz "green (${BASE_URL}/readyz)"
	else
		printf '  %-17s %s\n' readyz "not ready"
	fi
	"$STACK" status dev || true
}

case "$MODE" in
foreground | fg) mode_foreground ;;
up) mode_up ;;
down) mode_down ;;
status) mode_status ;;
*)
	echo "usage: scripts/dev.sh foreground|up|down|status" >&2
	exit 2
	;;
esac
