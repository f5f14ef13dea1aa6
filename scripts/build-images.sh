#!/usr/bin/env bash
# scripts/build-images.sh — build Mango's container images without any
# registry (`make images`):
#   <repo>/mango-api-server:<tag>              deploy/images/api-server.Dockerfile
#   <repo>/mango-execution-worker:<tag>        deploy/images/execution-worker.Dockerfile
#   <repo>/mango-execution-worker-local:<tag>  (target execution-worker-local)
# Each is FROM scratch: a static binary (CGO off, -trimpath, version and
# commit stamped into internal/buildinfo), CA certificates, /etc/passwd with the
# non-root user 65532 and a 1777 /tmp; the local worker adds static busybox.
#
#   scripts/build-images.sh [--tag TAG] [--repo REPO]   build the images
#   scripts/build-images.sh --stage DIR                 only stage the context
#
# TAG defaults to MANGO_IMAGE_TAG, else "dev"; REPO to MANGO_IMAGE_REPO, else
# "mangohq". MANGO_VERSION / MANGO_COMMIT override the stamped version
# (default `git describe --tags --always --dirty` / HEAD). --stage is what
# deploy/images/release.Dockerfile runs in its build stage, so both ways of
# building produce the same binaries and root filesystem.
set -euo pipefail

# shellcheck source=scripts/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
MANGO_LOG_TAG="images"
cd "$REPO_ROOT"

tag="${MANGO_IMAGE_TAG:-dev}"
repo="${MANGO_IMAGE_REPO:-mangohq}"
stage_only=""
while (($#)); do
	case "$1" in
	--tag) tag="${2:?--tag needs a value}"; shift 2 ;;
	--repo) repo="${2:?--repo needs a value}"; shift 2 ;;
	--stage) stage_only="${2:?--stage needs a directory}"; shift 2 ;;
	-h | --help) sed -n '2,19p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit 0 ;;
	*) die "unknown argument ${1} (see --help)" ;;
	esac
done

version="$(build_version)"
commit="$(build_commit)"

# stage <dir>: the binaries, rootfs/ (shared by all images) and busybox/
# (the local worker's extra tree).
stage() {
	local dir="$1" certs=/etc/ssl/certs/ca-certificates.crt
	if [[ ! -s "$certs" ]] && is_root && [[ "${MANGO_SKIP_APT:-0}" != 1 ]]; then
		log "installing ca-certificates"
		DEBIAN_FRONTEND=noninteractive apt-get install -y -q ca-certificates >/dev/null ||
			{ apt-get update -q >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -q ca-certificates >/dev/null; }
	fi
	[[ -s "$certs" ]] || die "${certs} missing: install ca-certificates"
	mkdir -p "$dir"
	local ldflags
	ldflags="-s -w $(go_ldflags "$version" "$commit")"
	log "go build (CGO_ENABLED=0, version ${version}, commit ${commit:0:12})"
	CGO_ENABLED=0 GOOS=linux GOWORK="${REPO_ROOT}/go.work" go build -trimpath -buildvcs=false -ldflags "$ldflags" \
		-o "${dir}/api-server" ./api-server/cmd/api-server
	CGO_ENABLED=0 GOOS=linux GOWORK="${REPO_ROOT}/go.work" go build -trimpath -buildvcs=false -ldflags "$ldflags" \
		-o "${dir}/execution-worker" ./execution-worker/cmd/execution-worker
	local root="${dir}/rootfs"
	mkdir -p "${root}/etc/ssl/certs" "${root}/tmp" "${root}/home/nonroot"
	chmod 1777 "${root}/tmp"
	chmod 0755 "${root}/home/nonroot"
	cp "$certs" "${root}/etc/ssl/certs/ca-certificates.crt"
	printf 'root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\nnobody:x:65534:65534:nobody:/nonexistent:/sbin/nologin\n' >"${root}/etc/passwd"
	printf 'root:x:0:\nnonroot:x:65532:\nnogroup:x:65534:\n' >"${root}/etc/group"
	busybox_tree "$(ensure_static_busybox)" "${dir}/busybox"
}

if [[ -n "$stage_only" ]]; then
	stage "$stage_only"
	ok "staged ${stage_only}"
	exit 0
fi

command -v docker >/dev/null 2>&1 || die "docker CLI not found"
docker info >/dev/null 2>&1 || die "Docker daemon unreachable (DOCKER_HOST=${DOCKER_HOST:-default})"
ctx="$(mktemp -d)"
trap 'rm -rf "$ctx"' EXIT
stage "$ctx"
cp deploy/images/api-server.Dockerfile deploy/images/execution-worker.Dockerfile "$ctx/"

# build <image> <dockerfile> <target>
build() {
	log "docker build ${repo}/${1}:${tag}"
	DOCKER_BUILDKIT=0 docker build --quiet --network none -f "${ctx}/${2}" --target "$3" \
		--build-arg VERSION="$version" --build-arg COMMIT="$commit" -t "${repo}/${1}:${tag}" "$ctx" >/dev/null
}
build mango-api-server api-server.Dockerfile api-server
build mango-execution-worker execution-worker.Dockerfile execution-worker
build mango-execution-worker-local execution-worker.Dockerfile execution-worker-local
for image in mango-api-server mango-execution-worker mango-execution-worker-local; do
	size="$(docker image inspect --format '{{.Size}}' "${repo}/${image}:${tag}")"
	ok "built ${repo}/${image}:${tag} ($((size / 1024 / 1024)) MiB)"
done
