#!/usr/bin/env bash
# scripts/bench.sh — API latency benchmark against the dev stack (make bench).
#
# Starts the dev environment when it is not running (and stops it again
# afterwards), then runs mango-bench: agent create and get at a fixed,
# open-loop rate (BENCH_RATE, default 50/s, for BENCH_DURATION, default
# 20s), then one-bash-round turns with the fake model: 100 in a row on one
# session, then BENCH_SESSIONS (default 8,32,64) concurrent sessions for
# BENCH_TURN_DURATION (default 20s) each, printed as one table; then
# commit -> SSE client latency with BENCH_FANOUT_STREAMS (default 1000,100)
# streams on one session, 100 commits at 20/s (p50/p99/max, every delivery
# counted; targets p99 < 50 ms at 1,000 and < 10 ms at 100) and the
# api-server's RSS per idle stream (measured on the first level; target
# <= 32 KB); then
# user.interrupt -> session.status_idle, BENCH_INTERRUPTS (default 20)
# times in each turn state (streaming the model, a sandbox tool, an MCP
# call the bench's own MCP server holds; target p99 <= 250 ms). With
# BENCH_WORKER_METRICS (the worker's /metrics URL) it also counts the
# interrupts the worker's push applied. After the turns table it prints
# the CPU each process (Temporal, api-server, worker, PostgreSQL) spent per
# turn over the turns run.
#
# Last, the sandbox level: the worker's real model client, the same on each provider of
# BENCH_SANDBOXES (default "local docker" with a Docker daemon, else
# "local"). The dev workers are restarted with the real model client
# (MANGO_MODEL=anthropic, MANGO_MODEL_BASE_URL=http://BENCH_MODEL_ADDR,
# default 127.0.0.1:18090, MANGO_ALLOW_UNSAFE_LOCAL_SANDBOX=1 for local),
# and mango-bench -mode turns -sandbox <provider> serves a scripted Messages
# API there: each turn's first model call answers one bash tool_use (echo
# $RANDOM), the call with its result ends the turn. Per provider it prints
# one-tool turns on one session (BENCH_SANDBOX_TURNS, default 100), the
# first turn of 10 new sessions, and BENCH_SANDBOX_SESSIONS (default 8,32)
# concurrent sessions for BENCH_TURN_DURATION each, with the load average
# before each; then it deletes its sessions and waits until the workers
# have destroyed their sandboxes. Afterwards the workers are restarted as
# dev-up starts them (fake model), or the stack is stopped if this script
# started it.
# BENCH_SANDBOX_ONLY=1 runs only this level, BENCH_SANDBOXES="" skips it.
#
# Measure on a wiped dev stack (make dev-down; rm -rf .mango/dev; make
# dev-up; or for the sandbox level alone: make dev-down; rm -rf .mango/dev;
# BENCH_SANDBOX_ONLY=1 make bench): work queued by earlier runs resumes on
# start and distorts the figures.
set -euo pipefail

# shellcheck source=scripts/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
MANGO_LOG_TAG="bench"
cd "$REPO_ROOT"
export GOWORK="${REPO_ROOT}/go.work"

started=0
if ! curl -fsS -o /dev/null http://127.0.0.1:18080/readyz 2>/dev/null; then
	log "dev environment not running: make dev-up"
	make dev-up >/dev/null
	started=1
fi
# restart_workers [VAR=value...]: stop the dev workers and start them again
# (dev-up, same binaries) with these variables.
restart_workers() {
	stop_pidfile execution-worker-docker "${REPO_ROOT}/.mango/dev/execution-worker-docker.pid" 20
	stop_pidfile execution-worker "${REPO_ROOT}/.mango/dev/execution-worker.pid" 20
	env -u MANGO_MODEL -u MANGO_MODEL_BASE_URL -u MANGO_MODEL_API_KEY -u MANGO_ALLOW_UNSAFE_LOCAL_SANDBOX \
		MANGO_DEV_SKIP_BUILD=1 "$@" scripts/dev.sh up >/dev/null
}
real_model=0
cleanup() {
	if [[ $started == 1 ]]; then
		make dev-down >/dev/null || true
	elif [[ $real_model == 1 ]]; then
		log "restarting the dev workers with the fake model"
		restart_workers || true
	fi
}
trap cleanup EXIT

set -a
# shellcheck source=/dev/null
. ./.dev.env
set +a
go build -o .mango/mango-bench ./scripts/bench

# sandbox_level: the real model client against a scripted Messages API, per
# provider of BENCH_SANDBOXES (see the header).
sandbox_level() {
	local providers addr p
	if [[ -n ${BENCH_SANDBOXES+set} ]]; then
		providers="$BENCH_SANDBOXES"
	elif command -v docker >/dev/null 2>&1 && timeout 5 docker info >/dev/null 2>&1; then
		providers="local docker"
	else
		providers="local"
		log "no Docker daemon: the sandbox level runs on local only"
	fi
	[[ -n $providers ]] || return 0
	addr="${BENCH_MODEL_ADDR:-127.0.0.1:18090}"
	# The bench waits, through the dev database, until the workers have
	# destroyed the sandboxes of the sessions it deletes at the end.
	eval "$("${REPO_ROOT}/scripts/stack.sh" env dev)"
	log "sandbox level (${providers}): restarting the dev workers with the real model client against http://${addr}"
	real_model=1
	restart_workers MANGO_MODEL=anthropic MANGO_MODEL_BASE_URL="http://${addr}" MANGO_MODEL_API_KEY=mango-bench \
		MANGO_ALLOW_UNSAFE_LOCAL_SANDBOX=1
	for p in $providers; do
		echo "load average before ${p}: $(cut -d' ' -f1-3 /proc/loadavg)"
		.mango/mango-bench -mode turns -sandbox "$p" -model-listen "$addr" -turns "${BENCH_SANDBOX_TURNS:-100}" \
			-sessions "${BENCH_SANDBOX_SESSIONS:-8,32}" -duration "${BENCH_TURN_DURATION:-20s}"
	done
}
if [[ ${BENCH_SANDBOX_ONLY:-} == 1 ]]; then
	sandbox_level
	exit 0
fi

.mango/mango-bench -rate "${BENCH_RATE:-50}" -duration "${BENCH_DURATION:-20s}"
# CPU per turn, per process: utime+stime (with reaped children: the
# worker's tool commands, PostgreSQL's exited backends) over the turns run,
# divided by every turn of it, from /proc.
cpu_ticks() { awk '{ print $14 + $15 + $16 + $17 }' "/proc/$1/stat" 2>/dev/null || echo 0; }
pg_ticks() {
	local t c
	t="$(cpu_ticks "$1")"
	for c in $(pgrep -P "$1"); do t=$((t + $(awk '{ print $14 + $15 }' "/proc/$c/stat" 2>/dev/null || echo 0))); done
	echo "$t"
}
state="${REPO_ROOT}/.mango/dev"
declare -A cpu_pid=([temporal]="$(read_pid "${state}/temporal.pid" || true)" [api-server]="$(read_pid "${state}/api-server.pid" || true)"
	[worker]="$(read_pid "${state}/execution-worker.pid" || true)" [postgres]="$(head -n1 "${state}/pg/postmaster.pid" 2>/dev/null || true)")
declare -A cpu_before
for p in "${!cpu_pid[@]}"; do
	[[ -n ${cpu_pid[$p]} ]] || continue
	if [[ $p == postgres ]]; then cpu_before[$p]="$(pg_ticks "${cpu_pid[$p]}")"; else cpu_before[$p]="$(cpu_ticks "${cpu_pid[$p]}")"; fi
done
.mango/mango-bench -mode turns -turns 100 -sessions "${BENCH_SESSIONS:-8,32,64}" -duration "${BENCH_TURN_DURATION:-20s}" | tee .mango/bench-turns.out
turns="$(awk 'NR > 1 && $(NF-6) ~ /^[0-9]+$/ { s += $(NF-6) } END { print s + 0 }' .mango/bench-turns.out)"
if ((turns > 0 && ${#cpu_before[@]} > 0)); then
	line="CPU per turn (${turns} turns, ms):"
	total=0
	for p in temporal api-server worker postgres; do
		[[ -n ${cpu_before[$p]:-} ]] || continue
		if [[ $p == postgres ]]; then now="$(pg_ticks "${cpu_pid[$p]}")"; else now="$(cpu_ticks "${cpu_pid[$p]}")"; fi
		d=$((now - cpu_before[$p]))
		total=$((total + d))
		line+="$(awk -v d="$d" -v n="$turns" -v hz="$(getconf CLK_TCK)" -v p="$p" 'BEGIN { printf " %s %.1f", p, d * 1000 / hz / n }')"
	done
	echo "${line}$(awk -v d="$total" -v n="$turns" -v hz="$(getconf CLK_TCK)" 'BEGIN { printf ", total %.1f", d * 1000 / hz / n }')"
fi
# Commit -> SSE with many streams on one session; the commits are timed by
# their own NOTIFY, read from the dev database.
eval "$("${REPO_ROOT}/scripts/stack.sh" env dev)"
.mango/mango-bench -mode fanout -fanout-streams "${BENCH_FANOUT_STREAMS:-1000,100}"
.mango/mango-bench -mode interrupts -interrupts "${BENCH_INTERRUPTS:-20}" -worker-metrics "${BENCH_WORKER_METRICS:-}"
sandbox_level
