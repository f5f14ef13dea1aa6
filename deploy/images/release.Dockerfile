# Multi-stage build of all three images for builders that can pull golang
# and debian (CI with a registry):
#
#   docker build -f deploy/images/release.Dockerfile --target api-server \
#     --build-arg VERSION=v1.2.3 --build-arg COMMIT=$(git rev-parse HEAD) \
#     -t mangohq/mango-api-server:v1.2.3 .
#
# (targets api-server, execution-worker, execution-worker-local). The stage
# step runs the same scripts/build-images.sh --stage as `make images`, so the
# binaries and the root filesystem are built the same way; the final stages
# repeat api-server.Dockerfile and execution-worker.Dockerfile with
# `--from=stage /stage/` in front of each COPY (deploy/images_test.go checks
# that they stay equal).
FROM golang:1.26-bookworm AS stage
RUN apt-get update -q && apt-get install -y -q --no-install-recommends busybox-static ca-certificates && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY . .
ARG VERSION=dev
ARG COMMIT=unknown
RUN MANGO_VERSION="${VERSION}" MANGO_COMMIT="${COMMIT}" scripts/build-images.sh --stage /stage

FROM scratch AS api-server
ARG VERSION=dev
ARG COMMIT=unknown
LABEL org.opencontainers.image.title="mango-api-server" \
      org.opencontainers.image.source="https://github.com/mangohq/mango" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${COMMIT}"
COPY --from=stage /stage/rootfs/ /
COPY --from=stage /stage/api-server /api-server
USER 65532:65532
ENV MANGO_HTTP_ADDR=0.0.0.0:8080 MANGO_GRPC_ADDR=0.0.0.0:8081 MANGO_LOG_FORMAT=json
EXPOSE 8080 8081
ENTRYPOINT ["/api-server"]

FROM scratch AS execution-worker
ARG VERSION=dev
ARG COMMIT=unknown
LABEL org.opencontainers.image.title="mango-execution-worker" \
      org.opencontainers.image.source="https://github.com/mangohq/mango" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${COMMIT}"
COPY --from=stage /stage/rootfs/ /
COPY --from=stage /stage/execution-worker /execution-worker
USER 65532:65532
ENV MANGO_METRICS_ADDR=0.0.0.0:9090 MANGO_LOG_FORMAT=json
EXPOSE 9090
ENTRYPOINT ["/execution-worker"]

FROM execution-worker AS execution-worker-local
COPY --from=stage /stage/busybox/ /
ENV PATH=/usr/local/bin:/usr/bin:/bin MANGO_SANDBOX=local
