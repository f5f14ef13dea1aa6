#!/usr/bin/env bash
# scripts/build-sandbox-image.sh — build the Docker sandbox image
# (default mango-sandbox:latest, the provider's default MANGO_SANDBOX_IMAGE)
# without any registry: FROM scratch plus Debian's statically linked busybox
# (package busybox-static) with one symlink per applet in /bin, so the image
# has /bin/sh, find, grep, setsid, kill and the other tools Mango's built-in
# tools and the docker provider need.
#
#   scripts/build-sandbox-image.sh [--force] [TAG]
#
# Idempotent: does nothing when TAG already exists, unless --force.
# MANGO_BUSYBOX overrides the busybox path (default /bin/busybox). When it is
# missing and we are root, busybox-static is installed with apt-get (unless
# MANGO_SKIP_APT=1). The layout matches sandboxdocker/dockertest, which the
# Go tests use to build the same image through the Engine API.
set -euo pipefail

# shellcheck source=scripts/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
MANGO_LOG_TAG="sandbox-image"

force=0
tag="mango-sandbox:latest"
for arg in "$@"; do
	case "$arg" in
	--force) force=1 ;;
	-h | --help)
		sed -n '2,16p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'
		exit 0
		;;
	-*) die "unknown option ${arg}" ;;
	*) tag="$arg" ;;
	esac
done

command -v docker >/dev/null 2>&1 || die "docker CLI not found"
docker info >/dev/null 2>&1 || die "Docker daemon unreachable (DOCKER_HOST=${DOCKER_HOST:-default})"

if ((!force)) && docker image inspect "$tag" >/dev/null 2>&1; then
	ok "${tag} already exists (use --force to rebuild)"
	exit 0
fi

busybox="$(ensure_static_busybox)"

ctx="$(mktemp -d)"
trap 'rm -rf "$ctx"' EXIT
root="${ctx}/rootfs"
mkdir -p "${root}/etc" "${root}/root" "${root}/tmp" "${root}/workspace"
chmod 0700 "${root}/root"
chmod 1777 "${root}/tmp"
busybox_tree "$busybox" "$root"
printf 'root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/false\n' >"${root}/etc/passwd"
printf 'root:x:0:\nnogroup:x:65534:\n' >"${root}/etc/group"
cat >"${ctx}/Dockerfile" <<'DOCKERFILE'
FROM scratch
COPY rootfs/ /
ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
WORKDIR /workspace
CMD ["sleep", "infinity"]
DOCKERFILE

log "building ${tag} from ${busybox}"
DOCKER_BUILDKIT=0 docker build --quiet --network none --label mango.sandbox-image=busybox -t "$tag" "$ctx" >/dev/null
docker run --rm --network none "$tag" /bin/sh -c 'find / -maxdepth 0 >/dev/null && echo ok | grep -q ok' ||
	die "${tag} built but /bin/sh, find or grep do not work"
ok "built ${tag}"
