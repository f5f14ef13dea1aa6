#!/usr/bin/env bash
# scripts/fuzz.sh — run every fuzz target for MANGO_FUZZ_TIME (default 10s)
# each: one `go test -run '^$' -fuzz '^<Target>$'` per target, as Go fuzzes
# one target per run. `make fuzz` and the "fuzz" step of scripts/test.sh run
# it; their seed corpora (f.Add and <package>/testdata/fuzz/<Target>/) also
# run as ordinary tests under `go test`. A failing input is written to
# <package>/testdata/fuzz/<Target>/: commit it with the fix, as a regression
# seed. Arguments name targets to run only those (scripts/fuzz.sh FuzzWriteFrame).
set -euo pipefail

# shellcheck source=scripts/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
MANGO_LOG_TAG="fuzz"
cd "$REPO_ROOT"
export GOWORK="${REPO_ROOT}/go.work"

# TARGETS is the one list of fuzz targets: "<package> <Target>".
TARGETS=(
	"./api-server/internal/eventspec FuzzParseSend"
	"./api-server/internal/agentspec FuzzCreate"
	"./execution-worker/agentruntime FuzzParseToolConfig"
	"./api-server/internal/httpapi FuzzCursorDecode"
	"./api-server/internal/httpapi FuzzCursorRoundTrip"
	"./api-server/internal/sse FuzzWriteFrame"
	"./execution-worker/model/modelanthropic FuzzReadStream"
	"./api-server/internal/skillbundle FuzzParse"
)

# fuzz_one <package> <target> <time>: 0 on success. Go 1.26 can fail a run
# with a bare "context deadline exceeded" when -fuzztime ends while a worker
# is busy (golang/go#75804, fixed in Go 1.27); such a run wrote no failing
# input, so it is retried once instead of failing the step.
fuzz_one() {
	local pkg="$1" target="$2" t="$3" out attempt
	out="$(mktemp)"
	for attempt in 1 2; do
		if go test -run '^$' -fuzz "^${target}\$" -fuzztime "$t" "$pkg" >"$out" 2>&1; then
			# go test passes when no fuzz target matches (a target moved
			# to another package): that is a failure here.
			if ! grep -q 'execs: [0-9]' "$out"; then
				cat "$out" >&2
				rm -f "$out"
				err "${target}: no such fuzz target in ${pkg} (nothing fuzzed)"
				return 1
			fi
			log "${target}: $(grep -o 'execs: [0-9]*' "$out" | tail -n 1) in ${t}"
			rm -f "$out"
			return 0
		fi
		if ((attempt == 1)) && grep -q 'context deadline exceeded' "$out" && ! grep -q 'Failing input written' "$out"; then
			warn "${target}: fuzz coordinator deadline race (golang/go#75804), no failing input; running it again"
			continue
		fi
		break
	done
	cat "$out" >&2
	rm -f "$out"
	err "${target} (${pkg}) failed"
	return 1
}

# run_fuzz [target...]: every target (or those named), all of them even
# when one fails; fails when any did.
run_fuzz() {
	local t="${MANGO_FUZZ_TIME:-10s}" entry pkg target ran=0 failed=()
	for entry in "${TARGETS[@]}"; do
		read -r pkg target <<<"$entry"
		if (($# > 0)) && [[ " $* " != *" ${target} "* ]]; then
			continue
		fi
		fuzz_one "$pkg" "$target" "$t" || failed+=("$target")
		ran=$((ran + 1))
	done
	((ran > 0)) || die "no fuzz target matches: $*"
	((${#failed[@]} == 0)) || die "fuzz targets failed: ${failed[*]}"
}

run_fuzz "$@"
