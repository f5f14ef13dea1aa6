# The execution-worker images: one static Go binary (CGO off) FROM scratch,
# with CA certificates, /etc/passwd naming the non-root user 65532 and a 1777
# /tmp. Two targets:
#   execution-worker        every remote provider and docker: nothing but
#                           the binary (the sandbox has the tools);
#   execution-worker-local  the local provider, whose commands run inside the
#                           worker's own filesystem, so it adds Debian's
#                           static busybox (/bin/sh, find, grep, ...).
# The context is staged by `scripts/build-images.sh` (`make images`).
# release.Dockerfile is the multi-stage equivalent for builders that can pull
# golang; its final stages must stay instruction-for-instruction equal to
# these (deploy/images_test.go checks it).
FROM scratch AS execution-worker
ARG VERSION=dev
ARG COMMIT=unknown
LABEL org.opencontainers.image.title="mango-execution-worker" \
      org.opencontainers.image.source="https://github.com/mangohq/mango" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${COMMIT}"
COPY rootfs/ /
COPY execution-worker /execution-worker
USER 65532:65532
ENV MANGO_METRICS_ADDR=0.0.0.0:9090 MANGO_LOG_FORMAT=json
EXPOSE 9090
ENTRYPOINT ["/execution-worker"]

FROM execution-worker AS execution-worker-local
COPY busybox/ /
ENV PATH=/usr/local/bin:/usr/bin:/bin MANGO_SANDBOX=local
