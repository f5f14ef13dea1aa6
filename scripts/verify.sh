#!/usr/bin/env bash
# scripts/verify.sh — fail if generated code is stale; buf lint (via make generate).
#   1. snapshot the generated dirs (db/, proto/) incl. untracked files,
#   2. run `make generate` (sqlc + buf generate, each only if its config exists),
#   3. fail if anything under them changed, showing `git status --porcelain`,
#   4. with CI=1 (or MANGO_VERIFY_STRICT=1) also fail if git reports any
#      uncommitted/untracked file in those dirs after generation,
#   5. buf lint runs inside `make generate` (if proto/buf.yaml exists),
#   6. every module's go.mod/go.sum is tidy (go mod tidy -diff).
set -euo pipefail

# shellcheck source=scripts/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
MANGO_LOG_TAG="verify"
cd "$REPO_ROOT"

MAKE="${MAKE:-make}"
GEN_DIRS=(db proto)

snapshot() {
	find "${GEN_DIRS[@]}" -type f -not -path '*/.git/*' -print0 2>/dev/null |
		sort -z | xargs -0 -r sha256sum
}

before="$(mktemp)"
after="$(mktemp)"
trap 'rm -f "$before" "$after"' EXIT

snapshot >"$before"
"$MAKE" --no-print-directory generate
snapshot >"$after"

if ! diff -q "$before" "$after" >/dev/null; then
	err "generated code is out of date; run \`make generate\` and commit the result. Changed files:"
	diff "$before" "$after" | awk '/^[<>]/ { print "    " $3 }' | sort -u >&2
	git status --porcelain -- "${GEN_DIRS[@]}" >&2 || true
	exit 1
fi

if [[ -n "${CI:-}${MANGO_VERIFY_STRICT:-}" ]] && git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
	dirty="$(git status --porcelain -- "${GEN_DIRS[@]}")"
	if [[ -n "$dirty" ]]; then
		err "uncommitted or untracked files in generated dirs:"
		printf '%s\n' "$dirty" >&2
		exit 1
	fi
fi
ok "generated code up to date"

# go.mod/go.sum must be tidy in every module (go mod tidy -diff changes nothing).
# deploy/ is outside go.work and always built with GOWORK=off.
for m in api-server db execution-worker internal proto scripts/bench deploy; do
	gowork="${REPO_ROOT}/go.work"
	[[ "$m" == deploy ]] && gowork=off
	if ! out="$(cd "$m" && GOWORK="$gowork" go mod tidy -diff 2>&1)"; then
		err "${m}/go.mod is not tidy; run \`(cd ${m} && go mod tidy)\` and commit:"
		printf '%s\n' "$out" | sed -n 1,40p >&2
		exit 1
	fi
done
ok "go.mod files tidy"
# buf lint runs as part of `make generate` (when proto/buf.yaml exists).
