#!/usr/bin/env bash
# scripts/install-tools.sh — build pinned dev tools into bin/ (only when needed).
#
#   * bin/temporal: Temporal CLI (dev server) ${TEMPORAL_CLI_VERSION}, built with
#     `go install` in its own module context (GOWORK=off, temp dir).
#   * sqlc, buf, protoc-gen-go, protoc-gen-go-grpc, goose, golangci-lint: the
#     `tool` lines of scripts/tools/go.mod (a separate module, not in go.work).
#   * PostgreSQL 15 server binaries (apt-get install postgresql-15 when root).
#   * busybox-static (used by sandbox tests; best effort, non-fatal).
#   * chromium (the console's browser tests; best effort, not for `runtime`).
#
# bin/.tools-stamp records a hash of scripts/tools/go.mod+go.sum and the
# Temporal version; a component is rebuilt only if missing or its pin changed.
# Set MANGO_SKIP_APT=1 to never call apt-get. With the argument `runtime`
# only PostgreSQL, the Temporal CLI, busybox and curl are installed.
set -euo pipefail

# shellcheck source=scripts/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
MANGO_LOG_TAG="tools"

TOOLS_DIR="${REPO_ROOT}/scripts/tools"
STAMP="${BIN_DIR}/.tools-stamp"
need go "install Go >= 1.26 (https://go.dev/dl/)"
mkdir -p "$BIN_DIR"

stamp_get() { [[ -f "$STAMP" ]] && awk -v k="$1" '$1 == k { print $2 }' "$STAMP"; }
stamp_set() {
	local tmp
	tmp="$(mktemp "${BIN_DIR}/.tools-stamp.XXXXXX")"
	{ [[ -f "$STAMP" ]] && awk -v k="$1" '$1 != k' "$STAMP"; printf '%s %s\n' "$1" "$2"; } >"$tmp"
	mv "$tmp" "$STAMP"
}

# wait_other_build <pattern>: if another `go install` of the same thing is
# already running (e.g. started by a teammate's shell), wait for it instead of
# starting a duplicate build on this small machine.
wait_other_build() {
	local pattern="$1" waited=0
	while pgrep -f -- "$pattern" >/dev/null 2>&1; do
		if ((waited == 0)); then
			log "another '${pattern}' is running; waiting for it to finish"
		fi
		waited=1
		sleep 5
	done
}

# ------------------------------------------------------------- Temporal CLI
install_temporal() {
	local want="$TEMPORAL_CLI_VERSION" have
	if [[ -x "${BIN_DIR}/temporal" && "$(stamp_get temporal || true)" == "$want" ]]; then
		log "bin/temporal ${want} up to date"
		return 0
	fi
	wait_other_build "go install github.com/temporalio/cli/cmd/temporal@"
	if [[ -x "${BIN_DIR}/temporal" ]]; then
		have="$(go version -m "${BIN_DIR}/temporal" 2>/dev/null | awk '$1 == "mod" { print $3; exit }')"
		if [[ "$have" == "$want" ]]; then
			stamp_set temporal "$want"
			log "bin/temporal ${want} up to date"
			return 0
		fi
		log "bin/temporal is ${have:-unknown}, want ${want}"
	fi
	log "building bin/temporal ${want} (~4 min cold)"
	local tmp
	tmp="$(mktemp -d)"
	(cd "$tmp" && GOWORK=off GOBIN="$BIN_DIR" go install "github.com/temporalio/cli/cmd/temporal@${want}") ||
		{
			rm -rf "$tmp"
			die "building the Temporal CLI ${want} failed"
		}
	rm -rf "$tmp"
	stamp_set temporal "$want"
	ok "bin/temporal ${want} installed"
}

# ------------------------------------------------------------- tools module
tools_hash() { cat "${TOOLS_DIR}/go.mod" "${TOOLS_DIR}/go.sum" 2>/dev/null | sha256sum | cut -c1-16; }

# tools_binaries_match: every tool binary exists and was built from the
# module version pinned in scripts/tools/go.mod.
tools_binaries_match() {
	local imp modpath modver bin have
	while read -r imp modpath modver; do
		bin="${BIN_DIR}/${imp##*/}"
		[[ -x "$bin" ]] || return 1
		have="$(go version -m "$bin" 2>/dev/null | awk '$1 == "mod" { print $2, $3; exit }')"
		[[ "$have" == "${modpath} ${modver}" ]] || return 1
	done < <(GOWORK=off go -C "$TOOLS_DIR" list -f '{{.ImportPath}} {{.Module.Path}} {{.Module.Version}}' tool)
}

tool_names() { GOWORK=off go -C "$TOOLS_DIR" list -f '{{.ImportPath}}' tool | sed 's#.*/##'; }

install_tools_module() {
	local want all=1 t
	want="$(tools_hash)"
	for t in sqlc buf protoc-gen-go protoc-gen-go-grpc goose golangci-lint; do
		[[ -x "${BIN_DIR}/${t}" ]] || all=0
	done
	if ((all)) && [[ "$(stamp_get tools || true)" == "$want" ]]; then
		log "tools module binaries up to date ($(tool_names | tr '\n' ' '))"
		return 0
	fi
	wait_other_build "go install tool"
	if tools_binaries_match; then
		stamp_set tools "$want"
		log "tools module binaries up to date ($(tool_names | tr '\n' ' '))"
		return 0
	fi
	log "building tools from scripts/tools/go.mod into bin/ (~5 min cold)"
	(cd "$TOOLS_DIR" && GOWORK=off GOBIN="$BIN_DIR" go install tool) || die "building the tools module failed"
	stamp_set tools "$want"
	ok "tools installed: $(tool_names | tr '\n' ' ')"
}

# ------------------------------------------------------------- apt packages
apt_install() {
	if [[ -n "${MANGO_SKIP_APT:-}" ]]; then
		return 1
	fi
	is_root || return 1
	command -v apt-get >/dev/null 2>&1 || return 1
	local apt_log="${STATE_ROOT}/apt.log"
	mkdir -p "$STATE_ROOT"
	log "apt-get install -y $* (log: ${apt_log#"${REPO_ROOT}/"})"
	# A fresh install of postgresql-15 may create a "main" cluster on 5432; ours are separate.
	if ! { DEBIAN_FRONTEND=noninteractive apt-get update -qq &&
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@"; } >"$apt_log" 2>&1; then
		tail -n 5 "$apt_log" >&2 || true
		return 1
	fi
}

ensure_postgres() {
	if pg_bindir >/dev/null; then
		log "PostgreSQL server binaries: $(pg_bindir)"
	else
		apt_install postgresql-15 postgresql-client-15 ||
			die "PostgreSQL 15 server binaries not found: apt-get install postgresql-15 (as root)"
		pg_bindir >/dev/null || die "PostgreSQL 15 installed but initdb not found under /usr/lib/postgresql/*/bin"
	fi
	if ! command -v psql >/dev/null 2>&1; then
		apt_install postgresql-client-15 || die "psql not found: apt-get install postgresql-client-15"
	fi
}

ensure_busybox() {
	if dpkg-query -W -f='${Status}' busybox-static 2>/dev/null | grep -q 'install ok installed'; then
		return 0
	fi
	apt_install busybox-static ||
		warn "busybox-static not installed (sandbox image tests need it): apt-get install busybox-static"
}

# ensure_chromium installs Debian's headless-capable Chromium, which the
# console's browser tests drive (make test only: not a runtime need).
ensure_chromium() {
	command -v chromium >/dev/null 2>&1 && return 0
	apt_install chromium ||
		warn "chromium not installed (the console's browser tests need it): apt-get install chromium"
}

ensure_misc() {
	command -v curl >/dev/null 2>&1 || apt_install curl || warn "curl not found: apt-get install curl (needed by make dev)"
}

# `install-tools.sh runtime` installs only what running Mango needs
# (PostgreSQL, the Temporal CLI, busybox, curl): `make dev` and the stacks
# call it, so a fresh clone starts without `make tools` first.
start=$SECONDS
ensure_postgres
ensure_busybox
ensure_misc
install_temporal
if [[ "${1:-}" == runtime ]]; then
	ok "runtime tools ready ($((SECONDS - start))s)"
	exit 0
fi
install_tools_module
ensure_chromium
ok "tools ready ($((SECONDS - start))s)"
