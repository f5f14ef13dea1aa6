# shellcheck shell=bash
# scripts/lib.sh — shared helpers for the Mango dev/test scripts.
# Source it:  . "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
# It sets REPO_ROOT, BIN_DIR, STATE_ROOT and defines logging, readiness,
# pid/port helpers. It never changes shell options of the caller except
# where documented.

if [[ -n "${MANGO_LIB_SOURCED:-}" ]]; then
	return 0
fi
MANGO_LIB_SOURCED=1

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd -P)"
BIN_DIR="${REPO_ROOT}/bin"
STATE_ROOT="${REPO_ROOT}/.mango"
export REPO_ROOT BIN_DIR STATE_ROOT

# Pinned Temporal CLI (dev server). See docs in DESIGN.md §2.
TEMPORAL_CLI_VERSION="v1.5.1"
export TEMPORAL_CLI_VERSION

# ---------------------------------------------------------------- logging
if [[ -t 2 ]]; then
	_c_info=$'\033[1;34m' _c_warn=$'\033[1;33m' _c_err=$'\033[1;31m' _c_ok=$'\033[1;32m' _c_off=$'\033[0m'
else
	_c_info='' _c_warn='' _c_err='' _c_ok='' _c_off=''
fi
_log_prefix() { printf '[%s %s]' "$(date +%H:%M:%S)" "${MANGO_LOG_TAG:-mango}"; }
log() { printf '%s %s%s%s\n' "$(_log_prefix)" "${_c_info}" "$*" "${_c_off}" >&2; }
ok() { printf '%s %s%s%s\n' "$(_log_prefix)" "${_c_ok}" "$*" "${_c_off}" >&2; }
warn() { printf '%s %sWARN: %s%s\n' "$(_log_prefix)" "${_c_warn}" "$*" "${_c_off}" >&2; }
err() { printf '%s %sERROR: %s%s\n' "$(_log_prefix)" "${_c_err}" "$*" "${_c_off}" >&2; }
die() {
	err "$*"
	exit 1
}

is_root() { [[ "$(id -u)" -eq 0 ]]; }

# need <binary-or-path> <how-to-get-it>
# Fails with a message naming what is missing and how to get it.
need() {
	local what="$1" how="$2"
	if [[ "$what" == */* ]]; then
		[[ -x "$what" ]] && return 0
		die "${what#"${REPO_ROOT}/"} missing: ${how}"
	fi
	command -v "$what" >/dev/null 2>&1 && return 0
	die "${what} not found: ${how}"
}

# wait_for <what> <timeout-seconds> <cmd...>
# Runs cmd every 0.2s until it succeeds; on timeout prints a clear error
# (plus the last output of cmd) and returns 1.
wait_for() {
	local what="$1" timeout="$2"
	shift 2
	local deadline=$((SECONDS + timeout)) out=""
	while true; do
		if out="$("$@" 2>&1)"; then
			return 0
		fi
		if ((SECONDS >= deadline)); then
			err "timed out after ${timeout}s waiting for ${what}"
			if [[ -n "$out" ]]; then
				printf '  last output of [%s]:\n%s\n' "$*" "$(printf '%s\n' "$out" | tail -n 5 | sed 's/^/    /')" >&2
			fi
			return 1
		fi
		sleep 0.2
	done
}

# ---------------------------------------------------------------- pids
# pid_alive <pid>: the process exists and is not a zombie (an exited child
# that its parent, possibly a slow-reaping pid 1, has not collected yet).
pid_alive() {
	[[ -n "${1:-}" ]] && kill -0 "$1" 2>/dev/null || return 1
	local stat
	stat="$(cat "/proc/$1/stat" 2>/dev/null)" || return 0
	stat="${stat##*) }"
	[[ "${stat:0:1}" != Z ]]
}

# read_pid <pidfile>: prints the pid if the file exists and the process is alive.
read_pid() {
	local f="$1" pid
	[[ -f "$f" ]] || return 1
	pid="$(head -n1 "$f" 2>/dev/null | tr -dc '0-9')"
	pid_alive "$pid" || return 1
	printf '%s\n' "$pid"
}

# stop_pid <name> <pid> [timeout=15]: TERM, wait, then KILL. Only this pid.
stop_pid() {
	local name="$1" pid="$2" timeout="${3:-15}"
	pid_alive "$pid" || return 0
	log "stopping ${name} (pid ${pid})"
	kill -TERM "$pid" 2>/dev/null || true
	local deadline=$((SECONDS + timeout))
	while pid_alive "$pid"; do
		if ((SECONDS >= deadline)); then
			warn "${name} (pid ${pid}) did not exit after ${timeout}s; sending SIGKILL"
			kill -KILL "$pid" 2>/dev/null || true
			sleep 0.2
			break
		fi
		sleep 0.1
	done
}

# stop_pidfile <name> <pidfile> [timeout]: stop the process recorded in pidfile, remove the file.
stop_pidfile() {
	local name="$1" f="$2" timeout="${3:-15}" pid
	if pid="$(read_pid "$f")"; then
		stop_pid "$name" "$pid" "$timeout"
	fi
	rm -f "$f"
}

# ---------------------------------------------------------------- ports
# port_in_use <port>: true if something listens on 127.0.0.1:<port> (TCP).
port_in_use() {
	local port="$1"
	if command -v ss >/dev/null 2>&1; then
		ss -Hltn "sport = :${port}" 2>/dev/null | grep -q .
	else
		(exec 3<>"/dev/tcp/127.0.0.1/${port}") 2>/dev/null
	fi
}

# tcp_open <host> <port>: true if a TCP connect succeeds.
tcp_open() { (exec 3<>"/dev/tcp/$1/$2") 2>/dev/null; }

# require_port_free <port> <what>
require_port_free() {
	if port_in_use "$1"; then
		die "port $1 (needed for $2) is already in use by another process; stop it or pick another profile"
	fi
}

# http_ok <url>: true if GET url returns 2xx.
http_ok() {
	if command -v curl >/dev/null 2>&1; then
		curl -fsS -o /dev/null --max-time 2 "$1"
	else
		die "curl not found: apt-get install curl"
	fi
}

# ---------------------------------------------------------------- misc
# random_hex <bytes>
random_hex() { head -c "${1:-16}" /dev/urandom | od -An -tx1 | tr -d ' \n'; }

# timed <label> <cmd...>: runs cmd, prints elapsed time; returns cmd's status.
timed() {
	local label="$1" start rc
	shift
	start=$SECONDS
	log "==> ${label}"
	"$@" && rc=0 || rc=$?
	if ((rc == 0)); then
		ok "<== ${label}: ok ($((SECONDS - start))s)"
	else
		err "<== ${label}: FAILED with status ${rc} ($((SECONDS - start))s)"
	fi
	return "$rc"
}

# pg_bindir: prints the PostgreSQL server bin dir (prefers 15), or fails.
pg_bindir() {
	local d
	for d in "${MANGO_PG_BINDIR:-}" /usr/lib/postgresql/15/bin "$(pg_config --bindir 2>/dev/null || true)"; do
		if [[ -n "$d" && -x "$d/initdb" && -x "$d/pg_ctl" ]]; then
			printf '%s\n' "$d"
			return 0
		fi
	done
	for d in /usr/lib/postgresql/*/bin; do
		if [[ -x "$d/initdb" && -x "$d/pg_ctl" ]]; then
			printf '%s\n' "$d"
			return 0
		fi
	done
	return 1
}

# ---------------------------------------------------------------- builds
# build_version / build_commit: what release builds stamp into
# internal/buildinfo (MANGO_VERSION / MANGO_COMMIT override; a tree without
# git history gives "dev" / "unknown").
build_version() {
	if [[ -n "${MANGO_VERSION:-}" ]]; then printf '%s' "$MANGO_VERSION"; return; fi
	git -C "$REPO_ROOT" describe --tags --always --dirty 2>/dev/null || printf 'dev'
}
build_commit() {
	if [[ -n "${MANGO_COMMIT:-}" ]]; then printf '%s' "$MANGO_COMMIT"; return; fi
	git -C "$REPO_ROOT" rev-parse HEAD 2>/dev/null || printf 'unknown'
}
# go_ldflags <version> <commit>: the -ldflags of every stamped build.
go_ldflags() {
	printf -- '-X github.com/mangohq/mango/internal/buildinfo.version=%s -X github.com/mangohq/mango/internal/buildinfo.commit=%s' "$1" "$2"
}

# ensure_static_busybox: print the path of a statically linked busybox
# (MANGO_BUSYBOX, default /bin/busybox), installing Debian's busybox-static
# with apt-get when it is missing and we are root (unless MANGO_SKIP_APT=1).
ensure_static_busybox() {
	local busybox="${MANGO_BUSYBOX:-/bin/busybox}"
	_is_static() { [[ -x "$1" ]] && ! LC_ALL=C readelf -l "$1" 2>/dev/null | grep -q 'INTERP'; }
	if ! _is_static "$busybox"; then
		if [[ -z "${MANGO_BUSYBOX:-}" ]] && is_root && [[ "${MANGO_SKIP_APT:-0}" != 1 ]]; then
			log "installing busybox-static"
			DEBIAN_FRONTEND=noninteractive apt-get install -y -q busybox-static >/dev/null ||
				{ apt-get update -q >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -q busybox-static >/dev/null; }
		fi
		_is_static "$busybox" || die "${busybox} is not a statically linked busybox; install busybox-static or set MANGO_BUSYBOX"
	fi
	printf '%s' "$busybox"
}

# busybox_tree <busybox> <dir>: /bin/busybox plus one symlink per applet,
# with sbin, usr/bin and usr/sbin pointing at bin.
busybox_tree() {
	local busybox="$1" root="$2" applet
	mkdir -p "${root}/bin" "${root}/usr"
	cp "$busybox" "${root}/bin/busybox"
	chmod 0755 "${root}/bin/busybox"
	for applet in $("$busybox" --list); do
		case "$applet" in busybox | *[/[]*) continue ;; esac
		ln -s busybox "${root}/bin/${applet}"
	done
	ln -s bin "${root}/sbin"
	ln -s ../bin "${root}/usr/bin"
	ln -s ../bin "${root}/usr/sbin"
}
